package replicas

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"pgregory.net/rapid"
)

// defaulted is tmpl as the API server stores it: the fields it defaults in
// a pod template set (a subset of them, enough to matter).
func defaulted(tmpl corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	t := *tmpl.DeepCopy()
	grace := int64(30)
	if t.Spec.RestartPolicy == "" {
		t.Spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	if t.Spec.DNSPolicy == "" {
		t.Spec.DNSPolicy = corev1.DNSClusterFirst
	}
	if t.Spec.TerminationGracePeriodSeconds == nil {
		t.Spec.TerminationGracePeriodSeconds = &grace
	}
	if t.Spec.SecurityContext == nil {
		t.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if t.Spec.SchedulerName == "" {
		t.Spec.SchedulerName = corev1.DefaultSchedulerName
	}
	for i := range t.Spec.Containers {
		c := &t.Spec.Containers[i]
		if c.TerminationMessagePath == "" {
			c.TerminationMessagePath = corev1.TerminationMessagePathDefault
		}
		if c.TerminationMessagePolicy == "" {
			c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
		}
		if c.ImagePullPolicy == "" {
			c.ImagePullPolicy = corev1.PullIfNotPresent
		}
		for j := range c.Ports {
			if c.Ports[j].Protocol == "" {
				c.Ports[j].Protocol = corev1.ProtocolTCP
			}
		}
		if p := c.ReadinessProbe; p != nil {
			if p.PeriodSeconds == 0 {
				p.PeriodSeconds = 10
			}
			if p.TimeoutSeconds == 0 {
				p.TimeoutSeconds = 1
			}
			if p.HTTPGet != nil && p.HTTPGet.Scheme == "" {
				p.HTTPGet.Scheme = corev1.URISchemeHTTP
			}
		}
	}
	return t
}

func container(image string) corev1.Container {
	return corev1.Container{
		Name: "app", Image: image,
		Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
		Env:   []corev1.EnvVar{{Name: "MODE", Value: "serve"}},
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080)}}},
	}
}

func template(cs ...corev1.Container) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: cs}}
}

// TestCovers: what the TemplateFunc sets must hold in the live template;
// what it leaves unset may be defaulted; lists and maps match in length.
func TestCovers(t *testing.T) {
	v2 := defaulted(template(container("app:v2")))
	cases := []struct {
		name       string
		want, live corev1.PodTemplateSpec
		covered    bool
	}{
		{"equal", v2, v2, true},
		{"written unset, stored defaulted", template(container("app:v2")), v2, true},
		{"another image", template(container("app:v2")), defaulted(template(container("app:v1"))), false},
		{"an env value changed", func() corev1.PodTemplateSpec {
			w := template(container("app:v2"))
			w.Spec.Containers[0].Env[0].Value = "debug"
			return w
		}(), v2, false},
		{"an env var more in live", template(container("app:v2")), func() corev1.PodTemplateSpec {
			l := *v2.DeepCopy()
			l.Spec.Containers[0].Env = append(l.Spec.Containers[0].Env, corev1.EnvVar{Name: "X", Value: "1"})
			return l
		}(), false},
		{"a container less in live", template(container("app:v2"), container("sidecar:1")), v2, false},
		{"a label more in live", func() corev1.PodTemplateSpec {
			w := template(container("app:v2"))
			w.Labels = map[string]string{"app": "web"}
			return w
		}(), func() corev1.PodTemplateSpec {
			l := *v2.DeepCopy()
			l.Labels = map[string]string{"app": "web", "tier": "x"}
			return l
		}(), false},
		{"a quantity written in another form", func() corev1.PodTemplateSpec {
			w := template(container("app:v2"))
			w.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("1000m")
			return w
		}(), v2, true},
		{"another quantity", func() corev1.PodTemplateSpec {
			w := template(container("app:v2"))
			w.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("2")
			return w
		}(), v2, false},
		{"a set pointer, unset in live", func() corev1.PodTemplateSpec {
			w := template(container("app:v2"))
			w.Spec.Containers[0].LivenessProbe = &corev1.Probe{PeriodSeconds: 5}
			return w
		}(), v2, false},
		{"a pointer to a zero value, unset in live", func() corev1.PodTemplateSpec {
			w := template(container("app:v2"))
			w.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{}
			return w
		}(), v2, true},
		{"a probe's port changed", func() corev1.PodTemplateSpec {
			w := template(container("app:v2"))
			w.Spec.Containers[0].ReadinessProbe.HTTPGet.Port = intstr.FromString("http")
			return w
		}(), v2, false},
	}
	for _, tc := range cases {
		if got := covers(reflect.ValueOf(tc.want), reflect.ValueOf(tc.live)); got != tc.covered {
			t.Errorf("%s: covers = %v, want %v", tc.name, got, tc.covered)
		}
	}
}

// TestCoversProperties: a template covers itself and itself as the API
// server defaults it; a different image, environment value or label in
// the live template is never covered.
func TestCoversProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		word := rapid.StringMatching(`[a-z]{1,6}`)
		n := rapid.IntRange(1, 3).Draw(t, "containers")
		var cs []corev1.Container
		for i := range n {
			c := corev1.Container{Name: fmt.Sprintf("c%d", i), Image: word.Draw(t, "image")}
			if rapid.Bool().Draw(t, "port") {
				c.Ports = []corev1.ContainerPort{{ContainerPort: rapid.Int32Range(1, 65535).Draw(t, "port")}}
			}
			for j := range rapid.IntRange(0, 3).Draw(t, "env") {
				c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("E%d", j), Value: word.Draw(t, "value")})
			}
			cs = append(cs, c)
		}
		want := template(cs...)
		want.Labels = map[string]string{"app": word.Draw(t, "label")}
		live := defaulted(want)
		for name, l := range map[string]corev1.PodTemplateSpec{"itself": want, "defaulted": live} {
			if !covers(reflect.ValueOf(want), reflect.ValueOf(l)) {
				t.Fatalf("%s: not covered: %+v", name, l)
			}
		}
		changed := *live.DeepCopy()
		i := rapid.IntRange(0, n-1).Draw(t, "changed container")
		c := &changed.Spec.Containers[i]
		switch what := rapid.SampledFrom([]string{"image", "env", "label"}).Draw(t, "what"); {
		case what == "image":
			c.Image += "-old"
		case what == "env" && len(c.Env) > 0:
			c.Env[0].Value += "-old"
		default:
			changed.Labels["app"] += "-old"
		}
		if covers(reflect.ValueOf(want), reflect.ValueOf(changed)) {
			t.Fatalf("a changed template is covered: want %+v, live %+v", want, changed)
		}
	})
}
