package replicas_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/replicas"
)

// rolloutStatus is what kubectl rollout status concludes from a Deployment
// (the rules of kubectl's DeploymentStatusViewer, restated): nothing is
// done until the controller has observed the current generation; a
// Progressing condition whose reason is ProgressDeadlineExceeded is a
// failure; then the rollout waits while updatedReplicas is below
// spec.replicas, while status.replicas is above updatedReplicas (old pods
// not yet stopped), and while availableReplicas is below updatedReplicas.
// why says what it waits for.
func rolloutStatus(d *appsv1.Deployment) (done bool, why string) {
	st := d.Status
	if d.Generation > st.ObservedGeneration {
		return false, "spec update not observed"
	}
	for _, c := range st.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return false, "progress deadline exceeded"
		}
	}
	switch {
	case d.Spec.Replicas != nil && st.UpdatedReplicas < *d.Spec.Replicas:
		return false, fmt.Sprintf("%d of %d new replicas updated", st.UpdatedReplicas, *d.Spec.Replicas)
	case st.Replicas > st.UpdatedReplicas:
		return false, fmt.Sprintf("%d old replicas pending termination", st.Replicas-st.UpdatedReplicas)
	case st.AvailableReplicas < st.UpdatedReplicas:
		return false, fmt.Sprintf("%d of %d updated replicas available", st.AvailableReplicas, st.UpdatedReplicas)
	}
	return true, "successfully rolled out"
}

// judged is a client config that keeps the last Deployment its GETs
// answered: the very object a Setter or Deployer built on it judged.
type judged struct {
	mu   sync.Mutex
	last *appsv1.Deployment
}

func (j *judged) config(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			res, err := rt.RoundTrip(req)
			if err != nil || req.Method != http.MethodGet || res.StatusCode != http.StatusOK || !strings.Contains(req.URL.Path, "/deployments/") {
				return res, err
			}
			body, rerr := io.ReadAll(res.Body)
			_ = res.Body.Close()
			res.Body = io.NopCloser(bytes.NewReader(body))
			if rerr != nil {
				return res, err
			}
			obj, _, derr := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
			if d, ok := obj.(*appsv1.Deployment); derr == nil && ok {
				j.mu.Lock()
				j.last = d
				j.mu.Unlock()
			}
			return res, err
		})
	})
	return cfg
}

func (j *judged) get() *appsv1.Deployment {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.last
}

// TestRevisionAgreesWithRolloutStatus: through every step of a real
// Deployment controller (a rolling update of 3 pods, a scale-up, a
// scale-down, a new template at 0 replicas), the Deployer's Updated is
// compared with kubectl rollout status on the very object the Deployer
// read: Updated is never reported while kubectl would still wait, and
// kubectl never reports a rollout done that the Deployer does not, but
// while pods the spec no longer asks for are still there: counted in
// status.replicas (a scale-down the ReplicaSet has not yet reported done:
// kubectl compares status.replicas with updatedReplicas only) or in
// status.terminatingReplicas (old pods still stopping, which kubectl does
// not read). The Deployer waits for them: a side is rolled out only once
// nothing else runs on it.
func TestRevisionAgreesWithRolloutStatus(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	// Each pod ready 1 s after it starts: every step has states to see.
	deploymentWith(t, env.Kube, ns, "web", 3, map[string]string{kubetest.AnnotationReadyAfter: "1s"})
	waitRolledOut(t, env.Kube, ns, "web")
	var j judged
	cs, err := kubernetes.NewForConfig(j.config(env.Config))
	if err != nil {
		t.Fatal(err)
	}
	s := replicas.ForDeployment(cs, replicas.Workload{Namespace: ns, Name: "web", FullReplicas: 5})
	d := deployer(t, s)
	d.FixedCapacity = true

	for _, step := range []struct {
		name   string
		expect string
		do     func() error
		// waits: the step must show at least one state where kubectl
		// waits, with the generation observed.
		waits bool
	}{
		{"rolling update to v2", "v2", func() error { return d.Deploy(ctx, "v2") }, true},
		{"scale up to 5", "v2", func() error { return s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100}) }, true},
		{"scale down to 2", "v2", func() error { return s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 40}) }, false},
		{"scale to 0", "v2", func() error { return s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0}) }, false},
		{"v3 at 0 replicas", "v3", func() error { return d.Deploy(ctx, "v3") }, false},
		{"scale v3 up to 3", "v3", func() error { return s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 60}) }, true},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		var seen []string
		sawWait := false
		pctx, cancel := context.WithTimeout(ctx, waitTimeout)
		err := wait.PollUntilContextCancel(pctx, 10*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			rs, err := d.Revision(ctx, step.expect)
			if err != nil {
				return false, err
			}
			obj := j.get()
			done, why := rolloutStatus(obj)
			st, spec := obj.Status, *obj.Spec.Replicas
			terminating := int32(0)
			if st.TerminatingReplicas != nil {
				terminating = *st.TerminatingReplicas
			}
			line := fmt.Sprintf("Updated %v, kubectl: %s (generation %d, spec.replicas %d; status: observed %d, replicas %d, updated %d, available %d, terminating %d)",
				rs.Updated, why, obj.Generation, spec, st.ObservedGeneration, st.Replicas, st.UpdatedReplicas, st.AvailableReplicas, terminating)
			if len(seen) == 0 || seen[len(seen)-1] != line {
				seen = append(seen, line)
			}
			if rs.Revision != step.expect {
				return false, fmt.Errorf("revision %q, want %q", rs.Revision, step.expect)
			}
			switch {
			case rs.Updated && !done:
				return false, fmt.Errorf("Updated while kubectl waits: %s", line)
			case done && !rs.Updated && st.Replicas <= spec && terminating == 0:
				return false, fmt.Errorf("kubectl done and not Updated, with no pod beyond the spec or terminating: %s", line)
			}
			if !done && st.ObservedGeneration >= obj.Generation {
				sawWait = true
			}
			return rs.Updated, nil
		})
		cancel()
		t.Logf("%s:\n\t%s", step.name, strings.Join(seen, "\n\t"))
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if step.waits && !sawWait {
			t.Errorf("%s: never saw kubectl wait with the generation observed", step.name)
		}
	}
	// One ReplicaSet per template, the current one at the spec.
	if got, want := replicaSets(t, env.Kube, ns, "web"), map[string]int32{"example.com/app:web": 0, "example.com/app:v2": 0, "example.com/app:v3": 3}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ReplicaSets by image %v, want %v", got, want)
	}
}
