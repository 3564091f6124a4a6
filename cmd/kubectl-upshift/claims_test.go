package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	rl "github.com/upshift-dev/upshift/rollout"
)

// createDeployment creates a Deployment whose claim annotation holds
// holder (none when zero), as serve/replicas writes it.
func createDeployment(t *testing.T, env *kubetest.Env, ns, name string, holder rl.Owner) {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{"team": "shop"}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/shop:v1"}}}},
		},
	}
	if !holder.IsZero() {
		b, _ := json.Marshal(holder)
		d.Annotations[workloadClaimAnnotation] = string(b)
	}
	if _, err := env.Kube.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func deploymentAnnotations(t *testing.T, env *kubetest.Env, ns, name string) map[string]string {
	t.Helper()
	d, err := env.Kube.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d.Annotations
}

// TestClaims: a Release deleted and re-created left its claims on its
// route and Deployments (the old UID): the new one's claim is refused with
// an error that names the annotation and the way out; `claims` shows the
// holders (gone, live, not looked up) of the Release's objects and of a
// claimed object; `claims release` refuses a live holder and one it cannot
// look up unless --force, and the command the error gives releases the
// stale claims, after which the new owner claims.
func TestClaims(t *testing.T) {
	p, env := newPlugin(t)
	ctx := context.Background()
	dc := dynamic.NewForConfigOrDie(env.Config)
	rel := createRelease(t, dc, p.ns, "web")
	other := createRelease(t, dc, p.ns, "other")
	stale := rl.Owner{Kind: "Release", Namespace: p.ns, Name: "web", UID: "uid-deleted"}
	live := rl.Owner{Kind: "Release", Namespace: p.ns, Name: "other", UID: other.GetUID()}
	prog := rl.Owner{Name: "standalone", UID: "uid-prog"}
	current := rl.Owner{Kind: "Release", Namespace: p.ns, Name: "web", UID: rel.GetUID()}

	createDeployment(t, env, p.ns, "web-a", stale)
	createDeployment(t, env, p.ns, "web-b", stale)
	createDeployment(t, env, p.ns, "shared", live)
	createDeployment(t, env, p.ns, "solo", prog)
	createDeployment(t, env, p.ns, "unrelated", rl.Owner{})
	ri := dc.Resource(httproutes).Namespace(p.ns)
	route := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"name": "web", "annotations": map[string]any{"team": "shop"}},
		"spec": map[string]any{"parentRefs": []any{map[string]any{"name": "gw"}}, "rules": []any{map[string]any{"backendRefs": []any{
			map[string]any{"name": "web-a", "port": int64(80), "weight": int64(100)},
			map[string]any{"name": "web-b", "port": int64(80), "weight": int64(0)}}}}},
	}}
	if _, err := ri.Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := gateway.Config{Routes: []gateway.RouteRef{{Namespace: p.ns, Name: "web"}},
		A: gateway.Backend{Name: "web-a", Port: 80}, B: gateway.Backend{Name: "web-b", Port: 80}}
	router, err := gateway.NewRouterForClientset(env.Gateway, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := router.Claim(ctx, stale, rl.Owner{}); err != nil {
		t.Fatal(err)
	}
	key := gateway.ClaimAnnotation(p.ns, cfg.A, cfg.B)

	// The new Release's claim is refused: the error says where the claim
	// is and how to release it.
	err = router.Claim(ctx, current, rl.Owner{})
	var ce *rl.ClaimedError
	if !errors.As(err, &ce) {
		t.Fatalf("claim of the re-created Release: %v, want a *ClaimedError", err)
	}
	wantCmd := "kubectl upshift claims release httproute.gateway.networking.k8s.io/web -n " + p.ns + " --holder uid-deleted"
	if ce.ReleaseCommand() != wantCmd || ce.Annotation != key || !strings.Contains(err.Error(), wantCmd) {
		t.Fatalf("the claim error: %v\nrelease command %q, want %q; annotation %q, want %q", err, ce.ReleaseCommand(), wantCmd, ce.Annotation, key)
	}

	// claims on the Release: its objects, by the claim's name and by its
	// spec; unrelated objects are not listed.
	out := p.mustRun("claims", "release/web")
	t.Logf("kubectl upshift claims release/web:\n%s", out)
	mustContain(t, "claims release/web", out,
		"OBJECT", "HOLDER IS",
		"deployment.apps/web-a", "deployment.apps/web-b", "httproute.gateway.networking.k8s.io/web",
		workloadClaimAnnotation, key+" (Service web-a:80, Service web-b:80)",
		"Release "+p.ns+"/web", "uid-deleted", "gone: Release "+p.ns+"/web is another object now (uid "+string(rel.GetUID())+")",
		"The holder Release "+p.ns+"/web (uid uid-deleted) is gone; release its claims with:",
		"kubectl upshift claims release release.operator.upshift.dev/web -n "+p.ns+" --holder uid-deleted")
	for _, not := range []string{"shared", "solo", "unrelated"} {
		if strings.Contains(out, "deployment.apps/"+not) {
			t.Errorf("claims release/web lists %s:\n%s", not, out)
		}
	}
	out = p.mustRun("claims", "deployment/shared")
	mustContain(t, "claims deployment/shared", out, "deployment.apps/shared", "Release "+p.ns+"/other", "live: Release "+p.ns+"/other exists")
	out = p.mustRun("claims", "deployment/unrelated")
	mustContain(t, "claims deployment/unrelated", out, "no claims on deployment/unrelated")

	// release refuses a holder with no claim there, a live one and one it
	// cannot look up, and writes nothing.
	refusals := []struct {
		args []string
		want string
	}{
		{[]string{"claims", "release", "release/web", "--holder", "uid-nobody"}, "no claim held by uid uid-nobody"},
		{[]string{"claims", "release", "deployment/shared", "--holder", string(live.UID)}, "is live"},
		{[]string{"claims", "release", "deployment/solo", "--holder", "uid-prog"}, "cannot be looked up"},
		{[]string{"claims", "release", "deployment/solo"}, "--holder: required"},
	}
	for _, r := range refusals {
		code, out, errOut := p.run(ctx, r.args...)
		if code != exitError || !strings.Contains(errOut, r.want) {
			t.Errorf("%s: exit %d, stderr %q; want 1 and %q\nstdout:\n%s", strings.Join(r.args, " "), code, errOut, r.want, out)
		}
	}
	for name, want := range map[string]rl.Owner{"shared": live, "solo": prog} {
		var got rl.Owner
		_ = json.Unmarshal([]byte(deploymentAnnotations(t, env, p.ns, name)[workloadClaimAnnotation]), &got)
		if got != want {
			t.Errorf("a refused release changed the claim on %s: %v, want %v", name, got, want)
		}
	}
	// --force releases them.
	out = p.mustRun("claims", "release", "deployment/solo", "--holder", "uid-prog", "--force")
	mustContain(t, "release --force", out, "deployment.apps/solo: released the claim upshift.dev/claim", "forced, the holder is unknown")
	if _, ok := deploymentAnnotations(t, env, p.ns, "solo")[workloadClaimAnnotation]; ok {
		t.Error("release --force left the claim on solo")
	}

	// The command the error gave releases every claim of the gone holder,
	// and nothing else of the objects.
	args := strings.Fields(strings.TrimPrefix(ce.ReleaseCommand(), "kubectl upshift "))
	out = p.mustRun(args...)
	t.Logf("%s:\n%s", ce.ReleaseCommand(), out)
	mustContain(t, "the error's release command", out,
		"deployment.apps/web-a: released the claim upshift.dev/claim of Release "+p.ns+"/web (uid uid-deleted; gone: ",
		"deployment.apps/web-b: released", "httproute.gateway.networking.k8s.io/web: released the claim "+key)
	for _, name := range []string{"web-a", "web-b"} {
		if diff := cmp.Diff(map[string]string{"team": "shop"}, deploymentAnnotations(t, env, p.ns, name)); diff != "" {
			t.Errorf("%s after the release: annotations (-want +got):\n%s", name, diff)
		}
	}
	u, err := ri.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"team": "shop"}, u.GetAnnotations()); diff != "" {
		t.Errorf("route after the release: annotations (-want +got):\n%s", diff)
	}
	if err := router.Claim(ctx, current, rl.Owner{}); err != nil {
		t.Errorf("the re-created Release's claim after the release: %v", err)
	}
	out = p.mustRun("claims", "release/web")
	mustContain(t, "claims after the release", out, "live: Release "+p.ns+"/web exists with uid "+string(rel.GetUID()))
	if strings.Contains(out, "uid-deleted") {
		t.Errorf("claims after the release still lists the gone holder:\n%s", out)
	}
}

// TestClaimsOf: the claims an object carries, read from its annotations:
// a workload's, a route's (with its rule's backends), and a value that is
// not a claim; other annotations are not claims.
func TestClaimsOf(t *testing.T) {
	deploy := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	obj := func(ann map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "web-b", "namespace": "shop", "resourceVersion": "7", "annotations": ann}}}
	}
	on := rl.ObjectRef{Group: "apps", Kind: "Deployment", Namespace: "shop", Name: "web-b"}
	holder := rl.Owner{Kind: "Release", Namespace: "shop", Name: "web", UID: "1111"}
	cases := []struct {
		name string
		ann  map[string]any
		want []claimRow
	}{
		{"none", map[string]any{"team": "shop", "upshift.dev/capacity": "50"}, nil},
		{"workload", map[string]any{workloadClaimAnnotation: `{"kind":"Release","namespace":"shop","name":"web","uid":"1111"}`},
			[]claimRow{{gvr: deploy, obj: on, rv: "7", key: workloadClaimAnnotation, holder: holder}}},
		{"route rules, sorted", map[string]any{
			gateway.ClaimAnnotationPrefix + "bb": `{"kind":"Release","namespace":"shop","name":"web","uid":"1111","backends":"Service web-a:80, Service web-b:80"}`,
			gateway.ClaimAnnotationPrefix + "aa": `{"name":"web"}`},
			[]claimRow{{gvr: deploy, obj: on, rv: "7", key: gateway.ClaimAnnotationPrefix + "aa", bad: `{"name":"web"}`},
				{gvr: deploy, obj: on, rv: "7", key: gateway.ClaimAnnotationPrefix + "bb", holder: holder, backends: "Service web-a:80, Service web-b:80"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := claimsOf(deploy, obj(c.ann))
			if diff := cmp.Diff(c.want, got, cmp.AllowUnexported(claimRow{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
