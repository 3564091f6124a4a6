package main_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/examples/operator/controller"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/kubetest/gatewaytest"
	"github.com/upshift-dev/upshift/serve/replicas"
)

// The tests run the operator binary, built once per package, as a
// ServiceAccount bound to the generated ClusterRole (config/rbac) by a
// RoleBinding in the test's namespace, against a real kube-apiserver with
// the generated CRD (config/crd), in a cluster in a box (kubetest with
// ClusterOptions): the real Deployment and ReplicaSet controllers, the
// scheduler, the garbage collector, and simulated nodes whose kubelet runs
// the pods. The test plays only the gateway (world.gateway), and checks
// every move of traffic against the pods as they were when the route was
// written (world.checkMove).

const fullReplicas = 4

var (
	binDir   string
	build    sync.Once
	bin      string
	buildErr error
	install  sync.Once
	instErr  error
)

func TestMain(m *testing.M) {
	crlog.SetLogger(logr.Discard()) // the test's own clients log nothing
	code := func() int {
		var err error
		if binDir, err = os.MkdirTemp("", "upshift-operator-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(binDir)
		// The tests need a real API server: without the binaries they
		// fail, saying how to get them (UPSHIFT_REQUIRE_KUBE=0 skips
		// them instead). The pods run: the Deployments' controllers
		// and the nodes are real.
		return kubetest.MainWith(m, kubetest.Options{Required: true, Cluster: &kubetest.ClusterOptions{}})
	}()
	os.Exit(code)
}

// operatorBinary builds the operator once, with -race when the test runs
// with it.
func operatorBinary(t testing.TB) string {
	t.Helper()
	build.Do(func() {
		bin = filepath.Join(binDir, "operator")
		args := []string{"build", "-o", bin}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bin
}

// installAPI installs the generated CRD and ClusterRole once.
func installAPI(env *kubetest.Env) error {
	install.Do(func() {
		if _, instErr = envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{Paths: []string{"config/crd"}, ErrorIfPathMissing: true}); instErr != nil {
			return
		}
		var role rbacv1.ClusterRole
		raw, err := os.ReadFile("config/rbac/role.yaml")
		if err != nil {
			instErr = err
			return
		}
		if instErr = yaml.UnmarshalStrict(bytes.TrimPrefix(raw, []byte("---\n")), &role); instErr != nil {
			return
		}
		if role.Name != controller.Name {
			instErr = fmt.Errorf("config/rbac/role.yaml names the ClusterRole %q, the operator %q: run generate.sh", role.Name, controller.Name)
			return
		}
		instErr = env.Client.Create(context.Background(), &role)
	})
	return instErr
}

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, gwv1.Install, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// world is one test's namespace: two Deployments, an HTTPRoute, the
// stand-in for the gateway, the watch of the Deployments' templates, and
// the operators.
type world struct {
	t    *testing.T
	env  *kubetest.Env
	c    client.Client // administrator, with the Release kind
	ns   string
	kcfg string // the operator's kubeconfig file
	ctx  context.Context

	mu sync.Mutex
	// weights is every distinct split of the route's weights, "A/B".
	weights []string
	// snaps is every generation of the route (extras_test.go).
	snaps []routeSnap
	// templates is the images of the pod template each Deployment was
	// seen with, in order.
	templates map[string][]string
	// moves is every move of traffic onto a side the gateway saw, with
	// what the side's pods were at that instant (checkMove).
	moves []move
}

func newWorld(t *testing.T) *world {
	t.Helper()
	env := kubetest.Get(t)
	if err := installAPI(env); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &world{t: t, env: env, c: c, ns: env.Namespace(t), ctx: ctx,
		templates: map[string][]string{}}
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	w.createSides()
	w.kcfg = w.serviceAccount()
	wg.Add(2)
	go func() { defer wg.Done(); w.watchTemplates() }()
	go func() { defer wg.Done(); w.gateway() }()
	w.waitSide("web-a", fullReplicas)
	return w
}

// createSides creates web-a running v1 with fullReplicas pods, web-b at
// 0 replicas running nothing, and the route, all traffic on web-a.
func (w *world) createSides() {
	ctx := context.Background()
	for _, side := range []struct {
		name, image string
		replicas    int32
	}{{"web-a", "example.com/app:v1", fullReplicas}, {"web-b", "example.com/app:none", 0}} {
		labels := map[string]string{"app": side.name}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: side.name},
			Spec: appsv1.DeploymentSpec{
				Replicas: new(side.replicas),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: side.image}}},
				},
			},
		}
		if err := w.c.Create(ctx, d); err != nil {
			w.t.Fatal(err)
		}
	}
	rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: w.ns, Name: "web", Gateway: "gw",
		A: gateway.Backend{Name: "web-a", Port: 80}, B: gateway.Backend{Name: "web-b", Port: 80}})
	if err != nil {
		w.t.Fatal(err)
	}
	if err := w.c.Create(ctx, rt); err != nil {
		w.t.Fatal(err)
	}
}

// serviceAccount creates the operator's ServiceAccount, binds the
// generated ClusterRole to it in the namespace, and writes its
// kubeconfig file.
func (w *world) serviceAccount() string {
	sa := bindOperator(w.t, w.env, w.c, w.ns)
	return writeKubeconfig(w.t, sa.Config.Host, sa.Config.CAData, sa.Config.BearerToken, w.ns)
}

// bindOperator creates the operator's ServiceAccount in ns and binds the
// generated ClusterRole to it there, and waits until RBAC allows it.
func bindOperator(t testing.TB, env *kubetest.Env, c client.Client, ns string) *kubetest.Clients {
	t.Helper()
	sa := env.ServiceAccount(t, ns, "upshift-operator")
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: controller.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: controller.Name},
		Subjects:   []rbacv1.Subject{sa.Subject},
	}
	if err := c.Create(context.Background(), binding); err != nil {
		t.Fatal(err)
	}
	// Wait until RBAC's cache allows what the operator does first.
	user := "system:serviceaccount:" + ns + ":upshift-operator"
	for deadline := time.Now().Add(20 * time.Second); ; {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "update",
				Group: v1alpha1.Group, Resource: "releases", Subresource: "status"}}}
		got, err := env.Kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the RoleBinding never took effect")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return sa
}

// writeKubeconfig writes a kubeconfig file for the server at host (its CA
// certificate caPEM) with a bearer token, ns as the default namespace.
func writeKubeconfig(t testing.TB, host string, caPEM []byte, token, ns string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: caPEM}
	kc.AuthInfos["operator"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "operator", Namespace: ns}
	kc.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// gateway plays the gateway: it accepts every generation of the route,
// and records every distinct split of its weights.
func (w *world) gateway() {
	rv := ""
	for w.ctx.Err() == nil {
		wi, err := w.env.Gateway.GatewayV1().HTTPRoutes(w.ns).Watch(w.ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			if w.ctx.Err() == nil {
				w.t.Errorf("gateway: watch: %v", err)
			}
			return
		}
		for ev := range wi.ResultChan() {
			rt, ok := ev.Object.(*gwv1.HTTPRoute)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			rv = rt.ResourceVersion
			// The world's own route is recorded and its moves checked;
			// other routes in the namespace (another Release's, a peer's)
			// are only accepted.
			if rt.Name == "web" {
				if side, weight, moved := w.record(rt); moved {
					w.checkMove(rt, side, weight)
				}
			}
			if !accepted(rt) {
				gatewaytest.Accept(errorTB{w.t}, w.c, gateway.KindHTTPRoute, w.ns, rt.Name)
			}
		}
		wi.Stop()
	}
}

// record records the route's split and generation, and returns the
// Deployment that the route gives more traffic than at its previous split,
// and its weight now (moved false: none does).
func (w *world) record(rt *gwv1.HTTPRoute) (side string, weight int32, moved bool) {
	// The weights of the route's own rule (rules the Router owns for
	// traffic extras come before it).
	snap := snapshot(w.ns, rt)
	split := fmt.Sprintf("%d/%d", snap.a, snap.b)
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.weights); n == 0 || w.weights[n-1] != split {
		if n > 0 {
			var a, b int32
			if _, err := fmt.Sscanf(w.weights[n-1], "%d/%d", &a, &b); err == nil {
				switch {
				case snap.a > a:
					side, weight, moved = "web-a", snap.a, true
				case snap.b > b:
					side, weight, moved = "web-b", snap.b, true
				}
			}
		}
		w.weights = append(w.weights, split)
	}
	if n := len(w.snaps); n == 0 || w.snaps[n-1].generation != snap.generation {
		w.snaps = append(w.snaps, snap)
	}
	return side, weight, moved
}

func accepted(rt *gwv1.HTTPRoute) bool {
	if len(rt.Status.Parents) != len(rt.Spec.ParentRefs) {
		return false
	}
	for _, p := range rt.Status.Parents {
		for _, c := range p.Conditions {
			if c.ObservedGeneration != rt.Generation {
				return false
			}
		}
	}
	return true
}

// errorTB reports a gateway failure without stopping the goroutine's
// test from another goroutine.
type errorTB struct{ t *testing.T }

func (e errorTB) Helper() {}
func (e errorTB) Fatalf(format string, args ...any) {
	e.t.Errorf(format, args...)
}

// watchReleases watches the namespace's Releases from now on.
func (w *world) watchReleases() watch.Interface {
	w.t.Helper()
	var list v1alpha1.ReleaseList
	if err := w.c.List(context.Background(), &list, client.InNamespace(w.ns)); err != nil {
		w.t.Fatal(err)
	}
	wc, err := client.NewWithWatch(w.env.Config, client.Options{Scheme: scheme})
	if err != nil {
		w.t.Fatal(err)
	}
	wi, err := wc.Watch(context.Background(), &v1alpha1.ReleaseList{}, client.InNamespace(w.ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		w.t.Fatal(err)
	}
	return wi
}

// countWrites counts the writes of the Release from now on, until the
// returned func is called, which returns the count.
func (w *world) countWrites() func() int {
	w.t.Helper()
	wi := w.watchReleases()
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range wi.ResultChan() {
			if ev.Type == watch.Modified {
				n++
			}
		}
	}()
	return func() int {
		time.Sleep(200 * time.Millisecond) // the last events
		wi.Stop()
		<-done
		return n
	}
}

// history returns the route's weight splits so far.
func (w *world) history() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.weights...)
}

// templatesOf returns the pod template revisions a Deployment was seen
// with.
func (w *world) templatesOf(name string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.templates[name]...)
}

// operator is one operator process.
type operator struct {
	cmd     *exec.Cmd
	log     string
	metrics string // host:port
	done    chan struct{}
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start starts an operator process for the world's namespace.
func (w *world) start(name string, args ...string) *operator {
	t := w.t
	t.Helper()
	o := &operator{log: filepath.Join(t.TempDir(), name+".log"), metrics: freePort(t), done: make(chan struct{})}
	f, err := os.Create(o.log)
	if err != nil {
		t.Fatal(err)
	}
	o.cmd = exec.Command(operatorBinary(t), append([]string{"-namespace", w.ns, "-metrics-bind-address", o.metrics,
		"-health-probe-bind-address", "0", "-lease-duration", "4s", "-renew-deadline", "3s", "-retry-period", "500ms", "-v"}, args...)...)
	o.cmd.Env = append(os.Environ(), "KUBECONFIG="+w.kcfg)
	o.cmd.Stdout, o.cmd.Stderr = f, f
	o.cmd.SysProcAttr = procAttr()
	if err := o.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = o.cmd.Wait(); f.Close(); close(o.done) }()
	t.Cleanup(func() {
		o.stop()
		if t.Failed() {
			raw, _ := os.ReadFile(o.log)
			if len(raw) > 6000 {
				raw = raw[len(raw)-6000:]
			}
			t.Logf("operator %s log (tail):\n%s", name, raw)
		}
	})
	return o
}

// kill kills the process at once, as a node failure would.
func (o *operator) kill() {
	_ = o.cmd.Process.Signal(syscall.SIGKILL)
	<-o.done
}

// stop asks the process to stop, then kills it.
func (o *operator) stop() {
	select {
	case <-o.done:
		return
	default:
	}
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-o.done:
	case <-time.After(10 * time.Second):
		o.kill()
	}
}

// logHas reports whether the process logged s.
func (o *operator) logHas(s string) bool {
	raw, _ := os.ReadFile(o.log)
	return bytes.Contains(raw, []byte(s))
}

// scrape returns the metrics endpoint's text.
func (o *operator) scrape(t *testing.T) string {
	t.Helper()
	res, err := http.Get("http://" + o.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// release returns a Release of the world's Deployments and route.
func (w *world) release(revision string, s v1alpha1.ReleaseStrategy) *v1alpha1.Release {
	return &v1alpha1.Release{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "web"},
		Spec: v1alpha1.ReleaseSpec{
			Revision: revision,
			Image:    v1alpha1.ImageTemplate{Container: "app", Template: "example.com/app:{revision}"},
			Strategy: s,
			Replicas: fullReplicas,
			A:        v1alpha1.Side{Deployment: "web-a", Service: "web-a", Port: 80},
			B:        v1alpha1.Side{Deployment: "web-b", Service: "web-b", Port: 80},
			Route:    v1alpha1.RouteRef{Name: "web"},
		},
	}
}

// imageID is the revision identity the operator gives revision when it
// runs image in the container "app".
func imageID(revision, image string) string {
	return replicas.Identity(revision, corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}})
}

// id is the identity of revision under the Release's image template.
func id(revision string) string { return imageID(revision, "example.com/app:"+revision) }

// get reads the Release.
func (w *world) get() *v1alpha1.Release {
	w.t.Helper()
	var rel v1alpha1.Release
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: "web"}, &rel); err != nil {
		w.t.Fatal(err)
	}
	return &rel
}

// edit changes the Release's spec with a JSON merge patch of what change
// changed, as kubectl patch does: no resourceVersion precondition, so the
// operator's status writes meanwhile (several a second during a walk)
// cannot make it fail with a conflict.
func (w *world) edit(change func(*v1alpha1.ReleaseSpec)) {
	w.t.Helper()
	rel := w.get()
	base := rel.DeepCopy()
	change(&rel.Spec)
	if err := w.c.Patch(context.Background(), rel, client.MergeFrom(base)); err != nil {
		w.t.Fatal(err)
	}
}

// waitFor waits until cond holds on the Release, as kubectl wait would.
func (w *world) waitFor(what string, timeout time.Duration, cond func(*v1alpha1.Release) bool) *v1alpha1.Release {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		rel := w.get()
		if cond(rel) {
			return rel
		}
		if time.Now().After(deadline) {
			s := rel.Status.Rollout
			w.t.Fatalf("waited %v for %s: phase %q, weight %d, stable %s on side %s, canary %s: %s; conditions %+v; route %v",
				timeout, what, s.Phase, s.Observed.Weight, s.StableRevision, s.StableSide, s.CanaryRevision, s.Message,
				rel.Status.Conditions, w.history())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// condition reports whether the Release has condition typ at status,
// for its current generation (what kubectl wait --for=condition checks).
func condition(rel *v1alpha1.Release, typ string, status metav1.ConditionStatus) bool {
	c := apimeta.FindStatusCondition(rel.Status.Conditions, typ)
	return c != nil && c.Status == status && c.ObservedGeneration == rel.Generation
}

// released: kubectl wait --for=condition=Released.
func released(rel *v1alpha1.Release) bool {
	return condition(rel, v1alpha1.ConditionReleased, metav1.ConditionTrue)
}

// checkForward checks that the route's canary weight only ever moved
// forward from 0 to 100, by at most step, and no split repeated: no hop
// was applied twice, none was lost.
func checkForward(t *testing.T, history []string, canary string, step int32) {
	t.Helper()
	seen := map[string]bool{}
	prev := int32(0)
	for i, split := range history {
		var a, b int32
		if _, err := fmt.Sscanf(split, "%d/%d", &a, &b); err != nil {
			t.Fatal(err)
		}
		w := b
		if canary == "A" {
			w = a
		}
		switch {
		case seen[split]:
			t.Errorf("route %v: split %s repeated", history, split)
		case i > 0 && (w <= prev || w-prev > step):
			t.Errorf("route %v: canary weight %d after %d, want a step of 1..%d forward", history, w, prev, step)
		}
		seen[split], prev = true, w
	}
	if prev != 100 {
		t.Errorf("route %v: the canary weight ends at %d, want 100", history, prev)
	}
}

// eventNotes returns "Reason: note" of every Event about the Release.
func (w *world) eventNotes() []string {
	w.t.Helper()
	list, err := w.env.Kube.EventsV1().Events(w.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Release" && e.Regarding.Name == "web" {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

func containsAll(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	joined := strings.Join(got, "\n")
	for _, s := range want {
		if !strings.Contains(joined, s) {
			t.Errorf("%s: no %q in\n%s", what, s, joined)
		}
	}
}

func create(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
