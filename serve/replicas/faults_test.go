package replicas_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/replicas"
	"github.com/upshift-dev/upshift/strategy"
)

// Fault scenarios: whole upgrades (v1 on Deployment web-a, side A, to v2 on
// Deployment web-b, side B) driven by rollout.Runner.Run on the real clock
// through this package's Setters and Deployers, against a whole cluster
// (kubetest.ClusterOptions: the real Deployment, ReplicaSet and node
// lifecycle controllers, the scheduler, kwok nodes), with a fault injected
// mid-rollout: canary pods that crash-loop, a node lost under the stable
// side, the controller manager stopped, a kubectl rollout restart. The
// router is fake.Router: what matters here is the capacity side.
//
// A faultMonitor checks the invariants of the strategy package on every
// observation: on every change of a pod or a Deployment (informers), and at
// every call of the Runner into an adapter (the adapters are wrapped:
// faultRouter, faultSetter, faultDeployer). The rules, and what is fair:
//
//   - "Ready" of a side, in reality, is the number of its pods that the
//     API server reports Ready (condition Ready true, not being deleted)
//     and that run the side's revision (the image v1 on A, v2 on B), as a
//     share of the full count: what every component of the cluster knows.
//   - Rule 1 as the engine sees it: a weight write that raises a side's
//     share to s happens only when that side's Setter reported Ready >= s
//     in the same reconcile (its last Capacity read). Exact.
//   - Rule 1 in reality: the side had ready pods for s at some instant
//     between faultSlack before that Capacity read and the write. The
//     engine reads the Deployment's status, which the controllers derive
//     from the pods with a lag, and pods may lose readiness at any moment
//     (a crash between the read and the write is nobody's fault); the
//     slack is the lag tolerated. A weight that stays where it was while
//     pods lose readiness under it is not a write: it is a deficit,
//     recorded (faultMonitor.deficits) and asserted per scenario (the
//     engine must walk it back or hold, as the strategy package says).
//   - The adapter's honesty: every Capacity read reports a Ready no higher
//     than the ready pods of the side at some instant of [read start -
//     faultSlack, read end]; a Deployment status frozen while its spec moved
//     on (observedGeneration behind) must not count as progress.
//   - The monitor's own view lags too (its informer, on a loaded machine):
//     a check that fails on it is confirmed from a fresh list of the pods,
//     counting those ready since at or before the instant checked (their
//     Ready condition's time, to the second).
//   - Rule 2: after every capacity write, the two Deployments' spec.replicas
//     add up to at most the replicas of 100 + MaxSurgePercent, and the
//     written side holds ceil(full * capacity / 100).
//   - Rule 3: no capacity write takes a side below the share of traffic the
//     route sends it at that moment; at every weight write each side's
//     spec.replicas covers its new share (capacity before traffic).
//   - Rule 6: a side that gets traffic has a template running its revision.
//   - Rule 7: a Deploy happens only at weight 0 (and the Deployment at 0
//     replicas); the image of a Deployment changes only at 0 replicas.
//
// Timing: one control plane per test binary; these tests stop components,
// so none calls t.Parallel, and each restarts what it stopped in t.Cleanup.
// Every wait is a poll bounded by faultWait.

const (
	faultFull  = 4  // replicas of a side at 100 percent
	faultSurge = 25 // MaxSurgePercent: one replica
	// faultSlack is how far the Deployment status the engine reads may
	// lag the pods (see the rules above).
	faultSlack = 5 * time.Second
	// faultWait bounds every wait: generous, for a loaded two-core machine.
	faultWait = 120 * time.Second
	// faultRestartedAt is the annotation kubectl rollout restart sets on
	// the pod template (kubectl's objectrestarter), to the current time in
	// RFC 3339.
	faultRestartedAt = "kubectl.kubernetes.io/restartedAt"
)

var (
	faultSideNames = map[strategy.Side]string{strategy.SideA: "web-a", strategy.SideB: "web-b"}
	faultRevisions = map[strategy.Side]string{strategy.SideA: "v1", strategy.SideB: "v2"}
)

func faultImage(revision string) string { return "example.com/app:" + revision }

// faultStrategy is the Incremental upgrade of most scenarios: 25 percent (one
// replica) a second, one replica of surge, polls every 500ms.
func faultStrategy() strategy.Strategy {
	return strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: faultSurge,
		Options: strategy.Options{PollInterval: metav1.Duration{Duration: 500 * time.Millisecond}}}
}

// faultSideOptions shape a side's Deployment: pod template annotations (the
// kubetest faults) and the nodes its pods may run on (all when empty).
type faultSideOptions struct {
	annotations map[string]string
	nodes       []string
}

// faultDeployment builds the Deployment of side: side A runs v1 at full
// replicas, side B starts at 0 replicas running nothing upshift recognises.
func faultDeployment(ns string, side strategy.Side, o faultSideOptions) *appsv1.Deployment {
	name := faultSideNames[side]
	labels := map[string]string{"app": name}
	replicasN, img := int32(0), faultImage("none")
	var annotations map[string]string
	if side == strategy.SideA {
		replicasN, img = faultFull, faultImage("v1")
		annotations = map[string]string{replicas.RevisionAnnotation: "v1"}
	}
	tmplAnn := map[string]string{}
	for k, v := range annotations {
		tmplAnn[k] = v
	}
	for k, v := range o.annotations {
		tmplAnn[k] = v
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicasN,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: tmplAnn},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: img}}},
			},
		},
	}
	if len(o.nodes) > 0 {
		d.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: kubetest.NodeLabel, Operator: corev1.NodeSelectorOpIn, Values: o.nodes}},
			}}},
		}}
	}
	return d
}

// faultPodReady reports whether the API server holds p as Ready and not
// being deleted.
func faultPodReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// faultPodSide is the side whose Deployment made p, "" for none.
func faultPodSide(p *corev1.Pod) strategy.Side {
	for side, name := range faultSideNames {
		if p.Labels["app"] == name {
			return side
		}
	}
	return ""
}

// faultNeed is the number of ready replicas a share of traffic needs.
func faultNeed(share int32) int { return int(replicas.Replicas(faultFull, share)) }

type faultSample struct {
	at    time.Time
	ready int
}

type faultRead struct {
	side       strategy.Side
	start, end time.Time
	st         rollout.CapacityStatus
}

type faultCapWrite struct {
	at   time.Time // when the write returned
	side strategy.Side
	r    rollout.CapacityRequest
}

type faultWeightWrite struct {
	at time.Time // when the write returned
	w  rollout.Weights
}

type faultRevisionRead struct {
	at   time.Time
	side strategy.Side
	rs   rollout.RevisionStatus
}

// faultPeriod is a time a side's traffic share exceeded its ready pods.
type faultPeriod struct {
	from, to   time.Time // to is zero while it lasts
	share      int32
	readyShare int32 // the lowest seen during the period
}

// faultMonitor watches the test's namespace and the adapters' calls, and
// records every violation of the rules of the file comment.
type faultMonitor struct {
	cs kubernetes.Interface
	ns string
	t0 time.Time // the monitor's start, the origin of the summary's times

	mu        sync.Mutex
	pods      map[string]*corev1.Pod
	ready     map[strategy.Side][]faultSample
	weights   rollout.Weights // in force: the last one written (none before the route exists)
	lastRead  map[strategy.Side]faultRead
	reads     []faultRead
	revReads  []faultRevisionRead
	capWrites []faultCapWrite
	wWrites   []faultWeightWrite
	deploys   []string
	// writes are the Runner's writes to the sides that succeeded.
	writes   []faultWrite
	deficits map[strategy.Side][]faultPeriod
	// seenReady is every pod ever seen ready, by name.
	seenReady map[string]*corev1.Pod
	// restarts is the most container restarts seen per side.
	restarts   map[strategy.Side]int32
	violations []string
}

func newFaultMonitor(t *testing.T, cs kubernetes.Interface, ns string) *faultMonitor {
	t.Helper()
	m := &faultMonitor{cs: cs, ns: ns, t0: time.Now(), pods: map[string]*corev1.Pod{}, ready: map[strategy.Side][]faultSample{},
		lastRead: map[strategy.Side]faultRead{}, deficits: map[strategy.Side][]faultPeriod{},
		seenReady: map[string]*corev1.Pod{}, restarts: map[strategy.Side]int32{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	pods := f.Core().V1().Pods().Informer()
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.pod(obj, false) },
		UpdateFunc: func(_, obj any) { m.pod(obj, false) },
		DeleteFunc: func(obj any) { m.pod(obj, true) },
	}); err != nil {
		t.Fatal(err)
	}
	deps := f.Apps().V1().Deployments().Informer()
	if _, err := deps.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj any) { m.deployment(old, obj) },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	f.Start(stop)
	t.Cleanup(func() { close(stop); f.Shutdown() })
	ctx, cancel := context.WithTimeout(t.Context(), faultWait)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, deps.HasSynced) {
		t.Fatal("the monitor's informers did not sync")
	}
	return m
}

func (m *faultMonitor) violate(format string, args ...any) {
	m.violations = append(m.violations, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
}

// pod takes a pod event: the ready count of its side, and deficits.
func (m *faultMonitor) pod(obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	side := faultPodSide(p)
	if side == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if deleted {
		delete(m.pods, p.Name)
	} else {
		m.pods[p.Name] = p
		if faultPodReady(p) {
			m.seenReady[p.Name] = p
		}
		for _, c := range p.Status.ContainerStatuses {
			m.restarts[side] = max(m.restarts[side], c.RestartCount)
		}
	}
	n := m.countReady(side)
	s := m.ready[side]
	if len(s) == 0 || s[len(s)-1].ready != n {
		m.ready[side] = append(s, faultSample{at: time.Now(), ready: n})
	}
	m.trackDeficits(time.Now())
}

// countReady counts side's ready pods that run its revision.
func (m *faultMonitor) countReady(side strategy.Side) int {
	n := 0
	for _, p := range m.pods {
		if faultPodSide(p) == side && faultPodReady(p) && len(p.Spec.Containers) > 0 &&
			p.Spec.Containers[0].Image == faultImage(faultRevisions[side]) {
			n++
		}
	}
	return n
}

// readyNow is side's ready count as last seen.
func (m *faultMonitor) readyNow(side strategy.Side) int {
	s := m.ready[side]
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1].ready
}

// maxReady is the most ready pods side had at any instant of [from, to].
func (m *faultMonitor) maxReady(side strategy.Side, from, to time.Time) int {
	most := 0
	for _, s := range m.ready[side] {
		if s.at.After(to) {
			break
		}
		if s.at.After(from) {
			most = max(most, s.ready)
		} else {
			most = s.ready // in force at from
		}
	}
	return most
}

// trackDeficits opens or closes each side's deficit period.
func (m *faultMonitor) trackDeficits(now time.Time) {
	for _, side := range []strategy.Side{strategy.SideA, strategy.SideB} {
		share := m.weights.Of(side)
		readyShare := int32(m.readyNow(side) * 100 / faultFull)
		ps := m.deficits[side]
		open := len(ps) > 0 && ps[len(ps)-1].to.IsZero()
		switch short := share > readyShare; {
		case short && !open:
			m.deficits[side] = append(ps, faultPeriod{from: now, share: share, readyShare: readyShare})
		case short && open:
			p := &ps[len(ps)-1]
			p.share, p.readyShare = max(p.share, share), min(p.readyShare, readyShare)
		case !short && open:
			ps[len(ps)-1].to = now
		}
	}
}

// deployment takes a Deployment update: rule 7 for every writer.
func (m *faultMonitor) deployment(oldObj, obj any) {
	prev, ok1 := oldObj.(*appsv1.Deployment)
	next, ok2 := obj.(*appsv1.Deployment)
	if !ok1 || !ok2 || len(prev.Spec.Template.Spec.Containers) == 0 || len(next.Spec.Template.Spec.Containers) == 0 {
		return
	}
	if prev.Spec.Template.Spec.Containers[0].Image == next.Spec.Template.Spec.Containers[0].Image {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if *prev.Spec.Replicas != 0 || *next.Spec.Replicas != 0 {
		m.violate("rule 7: %s changed image %s -> %s with spec.replicas %d -> %d", next.Name,
			prev.Spec.Template.Spec.Containers[0].Image, next.Spec.Template.Spec.Containers[0].Image, *prev.Spec.Replicas, *next.Spec.Replicas)
	}
}

// getBoth reads the two Deployments from the API server.
func (m *faultMonitor) getBoth(ctx context.Context) (map[strategy.Side]*appsv1.Deployment, error) {
	out := map[strategy.Side]*appsv1.Deployment{}
	for side, name := range faultSideNames {
		d, err := m.cs.AppsV1().Deployments(m.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		out[side] = d
	}
	return out, nil
}

// capacityRead records a Capacity read of side and checks its honesty.
func (m *faultMonitor) capacityRead(side strategy.Side, start time.Time, st rollout.CapacityStatus) {
	end := time.Now()
	m.mu.Lock()
	r := faultRead{side: side, start: start, end: end, st: st}
	m.lastRead[side] = r
	m.reads = append(m.reads, r)
	most := m.maxReady(side, start.Add(-faultSlack), end)
	m.mu.Unlock()
	if st.Ready > int32(most*100/faultFull) && !m.readyBy(side, end, faultNeed(st.Ready)) {
		m.mu.Lock()
		m.violate("honesty: side %s reported Ready %d, with at most %d ready pods of %s within %v before the read",
			side, st.Ready, most, faultRevisions[side], faultSlack)
		m.mu.Unlock()
	}
}

// readyBy reports whether side has, in a fresh list of its pods, at least
// n ready ones that have been ready since at or before at. It confirms a
// check that failed on what the informer delivered, which may lag on a
// loaded machine: a pod's Ready condition holds the time it last became
// ready (to the second: a pod ready up to a second after at counts).
func (m *faultMonitor) readyBy(side strategy.Side, at time.Time, n int) bool {
	l, err := m.cs.CoreV1().Pods(m.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + faultSideNames[side]})
	if err != nil {
		return false
	}
	count := 0
	for i := range l.Items {
		p := &l.Items[i]
		if !faultPodReady(p) || len(p.Spec.Containers) == 0 || p.Spec.Containers[0].Image != faultImage(faultRevisions[side]) {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && !c.LastTransitionTime.After(at) {
				count++
			}
		}
	}
	return count >= n
}

// weightWrite checks a weight write before it is made (rules 1, 3, 6).
func (m *faultMonitor) weightWrite(ctx context.Context, w rollout.Weights) {
	deps, err := m.getBoth(ctx)
	if err != nil {
		m.mu.Lock()
		m.violate("reading the Deployments at the weight write %+v: %v", w, err)
		m.mu.Unlock()
		return
	}
	now := time.Now()
	for _, side := range []strategy.Side{strategy.SideA, strategy.SideB} {
		share := w.Of(side)
		d := deps[side]
		m.mu.Lock()
		if int32(faultNeed(share)) > *d.Spec.Replicas {
			m.violate("rule 3: weight %+v gives side %s %d percent with spec.replicas %d", w, side, share, *d.Spec.Replicas)
		}
		if share > 0 && d.Spec.Template.Spec.Containers[0].Image != faultImage(faultRevisions[side]) {
			m.violate("rule 6: weight %+v sends traffic to side %s running %s", w, side, d.Spec.Template.Spec.Containers[0].Image)
		}
		if share <= m.weights.Of(side) {
			m.mu.Unlock()
			continue
		}
		read, ok := m.lastRead[side]
		if !ok || read.st.Ready < share {
			m.violate("rule 1 (observed): weight %+v raises side %s to %d with its last Capacity read reporting %+v", w, side, share, read.st)
		}
		most := m.maxReady(side, read.start.Add(-faultSlack), now)
		m.mu.Unlock()
		if most < faultNeed(share) && !m.readyBy(side, now, faultNeed(share)) {
			m.mu.Lock()
			m.violate("rule 1 (real): weight %+v raises side %s to %d with at most %d ready pods since %v before its read",
				w, side, share, most, faultSlack)
			m.mu.Unlock()
		}
	}
}

// weightWritten records a weight write that succeeded.
func (m *faultMonitor) weightWritten(w rollout.Weights) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.weights = w
	m.wWrites = append(m.wWrites, faultWeightWrite{at: time.Now(), w: w})
	m.trackDeficits(time.Now())
}

// capacityWrite checks a capacity write before it is made (rule 3).
func (m *faultMonitor) capacityWrite(side strategy.Side, r rollout.CapacityRequest) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if share := m.weights.Of(side); r.Percent < share {
		m.violate("rule 3: side %s asked for capacity %d while the route sends it %d", side, r.Percent, share)
	}
}

// capacityWritten checks what a capacity write left (rule 2).
func (m *faultMonitor) capacityWritten(ctx context.Context, side strategy.Side, r rollout.CapacityRequest) {
	deps, err := m.getBoth(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.capWrites = append(m.capWrites, faultCapWrite{at: time.Now(), side: side, r: r})
	m.writes = append(m.writes, faultWrite{at: time.Now(), side: side, what: fmt.Sprintf("capacity %d", r.Percent)})
	if err != nil {
		m.violate("reading the Deployments after capacity %+v on side %s: %v", r, side, err)
		return
	}
	if got, want := *deps[side].Spec.Replicas, replicas.Replicas(faultFull, r.Percent); got != want {
		m.violate("capacity %d on side %s left spec.replicas %d, want %d", r.Percent, side, got, want)
	}
	if total, most := *deps[strategy.SideA].Spec.Replicas+*deps[strategy.SideB].Spec.Replicas, replicas.Replicas(faultFull, 100+faultSurge); total > most {
		m.violate("rule 2: %d replicas asked in all after capacity %d on side %s, above %d (100%% + MaxSurge)", total, r.Percent, side, most)
	}
}

// deploy checks a Deploy before it is made (rule 7).
func (m *faultMonitor) deploy(side strategy.Side, revision string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deploys = append(m.deploys, fmt.Sprintf("%s on %s", revision, side))
	if share := m.weights.Of(side); share != 0 {
		m.violate("rule 7: deploying %s on side %s, which the route sends %d percent", revision, side, share)
	}
}

func (m *faultMonitor) revisionRead(side strategy.Side, rs rollout.RevisionStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.revReads = append(m.revReads, faultRevisionRead{at: time.Now(), side: side, rs: rs})
}

// faultRouter is fake.Router with every weight write checked.
type faultRouter struct {
	*fake.Router
	m *faultMonitor
}

func (r *faultRouter) SetWeights(ctx context.Context, w rollout.Weights) error {
	r.m.weightWrite(ctx, w)
	if err := r.Router.SetWeights(ctx, w); err != nil {
		return err
	}
	r.m.weightWritten(w)
	return nil
}

func (r *faultRouter) SetRoutes(ctx context.Context, rs rollout.Routes) error {
	r.m.weightWrite(ctx, rs.Weights)
	if err := r.Router.SetRoutes(ctx, rs); err != nil {
		return err
	}
	r.m.weightWritten(rs.Weights)
	return nil
}

// faultSetter is a Setter whose reads and writes the monitor sees; its
// other methods (Notify, Claim...) are the Setter's.
type faultSetter struct {
	*replicas.Setter
	side strategy.Side
	m    *faultMonitor
}

func (s *faultSetter) Capacity(ctx context.Context) (rollout.CapacityStatus, error) {
	start := time.Now()
	st, err := s.Setter.Capacity(ctx)
	if err == nil {
		s.m.capacityRead(s.side, start, st)
	}
	return st, err
}

func (s *faultSetter) SetCapacity(ctx context.Context, r rollout.CapacityRequest) error {
	s.m.capacityWrite(s.side, r)
	if err := s.Setter.SetCapacity(ctx, r); err != nil {
		return err
	}
	s.m.capacityWritten(ctx, s.side, r)
	return nil
}

// faultDeployer is a Deployer whose calls the monitor sees.
type faultDeployer struct {
	*replicas.Deployer
	side strategy.Side
	m    *faultMonitor
}

func (d *faultDeployer) Deploy(ctx context.Context, revision string) error {
	d.m.deploy(d.side, revision)
	if err := d.Deployer.Deploy(ctx, revision); err != nil {
		return err
	}
	d.m.mu.Lock()
	d.m.writes = append(d.m.writes, faultWrite{at: time.Now(), side: d.side, what: "deploy " + revision})
	d.m.mu.Unlock()
	return nil
}

func (d *faultDeployer) Revision(ctx context.Context, expect string) (rollout.RevisionStatus, error) {
	rs, err := d.Deployer.Revision(ctx, expect)
	if err == nil {
		d.m.revisionRead(d.side, rs)
	}
	return rs, err
}

// faultRig is one scenario: the two Deployments, the monitor, the Runner.
type faultRig struct {
	t        *testing.T
	env      *kubetest.Env
	ns       string
	m        *faultMonitor
	router   *faultRouter
	runner   *rollout.Runner
	commands chan rollout.Command

	mu     sync.Mutex
	events []rollout.Event

	done chan struct{}
	end  strategy.State
	err  error
}

func newFaultRig(t *testing.T, strat strategy.Strategy, stable, canary faultSideOptions) *faultRig {
	t.Helper()
	env := kubetest.Get(t)
	if env.Cluster == nil {
		t.Fatal("the fault scenarios need the whole cluster: TestMain must pass kubetest.Options.Cluster")
	}
	ns := env.Namespace(t)
	m := newFaultMonitor(t, env.Kube, ns)
	g := &faultRig{t: t, env: env, ns: ns, m: m, commands: make(chan rollout.Command, 1), done: make(chan struct{})}
	for side, o := range map[strategy.Side]faultSideOptions{strategy.SideA: stable, strategy.SideB: canary} {
		if _, err := env.Kube.AppsV1().Deployments(ns).Create(t.Context(), faultDeployment(ns, side, o), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	g.waitFor("web-a available at full replicas", func() (bool, string) {
		d := g.get("web-a")
		m.mu.Lock()
		n := m.readyNow(strategy.SideA)
		m.mu.Unlock()
		return d.Status.ObservedGeneration == d.Generation && d.Status.AvailableReplicas == faultFull && n == faultFull,
			fmt.Sprintf("status %+v, %d ready pods seen", d.Status, n)
	})
	g.router = &faultRouter{Router: fake.NewRouter(nil), m: m}
	m.weightWritten(rollout.Weights{A: 100}) // the route, all on A
	setters := map[strategy.Side]*faultSetter{}
	deployers := map[strategy.Side]*faultDeployer{}
	for side, name := range faultSideNames {
		s := replicas.ForDeployment(env.Kube, replicas.Workload{Namespace: ns, Name: name, FullReplicas: faultFull})
		d, err := s.Deployer(replicas.Image("app", faultImage))
		if err != nil {
			t.Fatal(err)
		}
		setters[side] = &faultSetter{Setter: s, side: side, m: m}
		deployers[side] = &faultDeployer{Deployer: d, side: side, m: m}
	}
	g.runner = &rollout.Runner{Strategy: strat, Router: g.router,
		A: setters[strategy.SideA], B: setters[strategy.SideB],
		RevisionA: deployers[strategy.SideA], RevisionB: deployers[strategy.SideB],
		Store: &fake.Store{},
		Observer: rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
			g.mu.Lock()
			g.events = append(g.events, e)
			g.mu.Unlock()
		})}
	if err := g.runner.Validate(); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g *faultRig) get(name string) *appsv1.Deployment {
	g.t.Helper()
	d, err := g.env.Kube.AppsV1().Deployments(g.ns).Get(g.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		g.t.Fatal(err)
	}
	return d
}

// waitFor polls cond until it holds, failing the test with its last reason
// after faultWait.
func (g *faultRig) waitFor(what string, cond func() (bool, string)) {
	g.t.Helper()
	deadline := time.Now().Add(faultWait)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("%s: not within %v (last: %s)\n%s", what, faultWait, why, g.summary())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// start runs the upgrade v1 -> v2 in the background; end waits for it.
func (g *faultRig) start() {
	ctx, cancel := context.WithTimeout(context.Background(), 4*faultWait)
	g.t.Cleanup(func() { cancel(); <-g.done })
	now := g.runner.Now()
	s := strategy.State{}.Retarget("v1", now).Retarget("v2", now)
	go func() {
		defer close(g.done)
		end, err := g.runner.Run(ctx, s, g.commands)
		g.mu.Lock()
		g.end, g.err = end, err
		g.mu.Unlock()
	}()
}

// wait waits for Run to return and returns what it returned.
func (g *faultRig) wait() strategy.State {
	g.t.Helper()
	select {
	case <-g.done:
	case <-time.After(2 * faultWait):
		g.t.Fatalf("Run did not return within %v\n%s", 2*faultWait, g.summary())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		g.t.Fatalf("Run: %v", g.err)
	}
	return g.end
}

// eventsWhere returns the events that match.
func (g *faultRig) eventsWhere(match func(e *rollout.Event) bool) []rollout.Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []rollout.Event
	for i := range g.events {
		if match(&g.events[i]) {
			out = append(out, g.events[i])
		}
	}
	return out
}

// faultDegraded is the reason of s's Degraded condition when it is true.
func faultDegraded(s *strategy.State) string {
	for _, c := range s.Conditions {
		if c.Type == strategy.ConditionDegraded && c.Status == metav1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

// weights returns the weights in force.
func (g *faultRig) weights() rollout.Weights {
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	return g.m.weights
}

// summary renders what happened, for a failure message, in seconds since
// the monitor started.
func (g *faultRig) summary() string {
	var b strings.Builder
	g.m.mu.Lock()
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%.3f", t.Sub(g.m.t0).Seconds())
	}
	fmt.Fprintf(&b, "weights written:")
	for _, w := range g.m.wWrites {
		fmt.Fprintf(&b, " %s A=%d/B=%d", at(w.at), w.w.A, w.w.B)
	}
	fmt.Fprintf(&b, "\ncapacity written:")
	for _, c := range g.m.capWrites {
		fmt.Fprintf(&b, " %s %s=%d", at(c.at), c.side, c.r.Percent)
	}
	for _, side := range []strategy.Side{strategy.SideA, strategy.SideB} {
		fmt.Fprintf(&b, "\nready pods of %s:", side)
		for _, s := range g.m.ready[side] {
			fmt.Fprintf(&b, " %s %d", at(s.at), s.ready)
		}
		for _, p := range g.m.deficits[side] {
			fmt.Fprintf(&b, "\ndeficit on %s: %s to %s, share %d, ready down to %d", side, at(p.from), at(p.to), p.share, p.readyShare)
		}
	}
	g.m.mu.Unlock()
	g.mu.Lock()
	phase, msg := strategy.Phase(""), ""
	if n := len(g.events); n > 0 {
		phase, msg = g.events[n-1].After.Phase, g.events[n-1].After.Message
	}
	fmt.Fprintf(&b, "\n%d reconciles; last phase %s: %s", len(g.events), phase, msg)
	g.mu.Unlock()
	return b.String()
}

// checkMonitor fails the test with every violation the monitor recorded,
// and with a deficit that does not end: at the end each side's ready pods
// cover its traffic (once the monitor's informer has caught up).
func (g *faultRig) checkMonitor() {
	g.t.Helper()
	var open []string
	deadline := time.Now().Add(faultWait)
	for {
		open = open[:0]
		g.m.mu.Lock()
		for side, ps := range g.m.deficits {
			if len(ps) > 0 && ps[len(ps)-1].to.IsZero() {
				open = append(open, fmt.Sprintf("side %s since %s", side, ps[len(ps)-1].from.Format("15:04:05.000")))
			}
		}
		g.m.mu.Unlock()
		if len(open) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	g.m.mu.Lock()
	violations := slices.Clone(g.m.violations)
	g.m.mu.Unlock()
	for _, v := range violations {
		g.t.Errorf("violation: %s", v)
	}
	if len(open) > 0 {
		g.t.Errorf("at the end, traffic above ready pods on %s", strings.Join(open, ", "))
	}
	g.t.Logf("%s", g.summary())
}

// serves checks the end: all traffic on side, whose Deployment runs its
// revision at full replicas, all ready; the other side at 0 replicas with
// no ready pod left.
func (g *faultRig) serves(side strategy.Side) {
	g.t.Helper()
	if w := g.weights(); w.Of(side) != 100 {
		g.t.Errorf("weights %+v at the end, want all on side %s", w, side)
	}
	other := side.Other()
	g.waitFor(fmt.Sprintf("side %s serving at full replicas, side %s empty", side, other), func() (bool, string) {
		d, o := g.get(faultSideNames[side]), g.get(faultSideNames[other])
		g.m.mu.Lock()
		ready, otherReady := g.m.readyNow(side), g.m.readyNow(other)
		g.m.mu.Unlock()
		ok := *d.Spec.Replicas == faultFull && d.Status.AvailableReplicas == faultFull && ready == faultFull &&
			d.Spec.Template.Spec.Containers[0].Image == faultImage(faultRevisions[side]) &&
			*o.Spec.Replicas == 0 && otherReady == 0
		return ok, fmt.Sprintf("%s: spec %d, available %d, %d ready pods, image %s; %s: spec %d, %d ready pods",
			d.Name, *d.Spec.Replicas, d.Status.AvailableReplicas, ready, d.Spec.Template.Spec.Containers[0].Image,
			o.Name, *o.Spec.Replicas, otherReady)
	})
}

// Canary pods that crash-loop after they became ready (every pod of the
// new revision: the fault is on web-b's template, which the Deployer keeps
// when it sets the image): the canary takes traffic while its pods are
// ready, they crash under it, and the rollout must count each observation
// of a canary short of its traffic as unhealthy, abort after
// UnhealthyThreshold (3) of them (reason CanaryReadinessLost), and walk
// back: stable capacity first, then the weight, then the canary scaled to
// 0. Only ready capacity ever gets traffic (the monitor), and at the end the
// stable side serves everything at full replicas.
func TestFaultCanaryCrashLoop(t *testing.T) {
	g := newFaultRig(t, faultStrategy(), faultSideOptions{}, faultSideOptions{annotations: map[string]string{
		kubetest.AnnotationFault:        kubetest.FaultCrashLoop,
		kubetest.AnnotationCrashAfter:   "2s",
		kubetest.AnnotationRestartAfter: "10s", // the kubelet's first back-off
	}})
	g.start()
	end := g.wait()
	g.checkMonitor()
	if end.Phase != strategy.PhaseAborted || end.Aborted == nil || end.Aborted.Reason != strategy.ReasonCanaryReadinessLost ||
		end.StableRevision != "v1" || end.StableSide != strategy.SideA {
		t.Errorf("ended %s (aborted %+v) on %s, side %s: %s; want Aborted for %s on v1, side A",
			end.Phase, end.Aborted, end.StableRevision, end.StableSide, end.Message, strategy.ReasonCanaryReadinessLost)
	}
	g.serves(strategy.SideA)
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	if g.m.restarts[strategy.SideB] == 0 {
		t.Errorf("no canary container restarted: the fault did not happen")
	}
	most := int32(0)
	for _, w := range g.m.wWrites {
		most = max(most, w.w.B)
	}
	if most == 0 {
		t.Errorf("the canary never carried traffic: its pods crashed before the first weight hop")
	}
	// The canary lost readiness under traffic: a deficit, closed by the
	// walk back.
	if len(g.m.deficits[strategy.SideB]) == 0 {
		t.Errorf("the canary never had traffic above its ready pods: the crash did not hit it under traffic")
	}
	t.Logf("canary peaked at weight %d; deploys %v", most, g.m.deploys)
}

// lastEvent returns the latest reconcile's event, and whether there is one.
func (g *faultRig) lastEvent() (rollout.Event, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.events) == 0 {
		return rollout.Event{}, false
	}
	return g.events[len(g.events)-1], true
}

// stableShort reports whether an observation shows the stable side's ready
// capacity below the traffic the route sends it.
func stableShort(o *strategy.Observation) bool { return o.Stable.Ready < 100-o.Weight }

// A node lost under the stable side, mid-rollout. The stable Deployment runs
// on two nodes and the canary on the third (so that the loss hits the stable
// side only: a canary pod on the lost node would be scenario
// TestFaultCanaryCrashLoop's readiness lost, and abort). The rollout pauses
// at weight 25 (the stable side still at full capacity, four pods); the
// node with the most stable pods (two at least) is lost: after the grace period the node lifecycle controller
// marks its pods not ready, and the engine must report Degraded
// (StableReadinessLost) and hold; the rollout is resumed while the stable
// side is still short, and must go on holding (no weight hop while an
// observation shows the stable side short) until the pods are evicted and
// their replacements on the other node are ready; then it completes, and
// the canary serves everything. The node is restored in t.Cleanup.
func TestFaultNodeLostUnderStable(t *testing.T) {
	env := kubetest.Get(t)
	if env.Cluster == nil || len(env.Cluster.Nodes) < 3 {
		t.Fatalf("needs a cluster of 3 nodes, have %+v", env.Cluster)
	}
	nodes := env.Cluster.Nodes
	strat := strategy.Canary{MaxSurgePercent: faultSurge,
		Steps:   []strategy.CanaryStep{strategy.SetWeight(25), strategy.PauseUntilResumed(), strategy.SetWeight(50), strategy.SetWeight(75)},
		Options: strategy.Options{PollInterval: metav1.Duration{Duration: 500 * time.Millisecond}}}
	g := newFaultRig(t, strat, faultSideOptions{nodes: nodes[:2]}, faultSideOptions{nodes: nodes[2:3]})
	g.start()
	// In the pause the stable side shrinks to its traffic: 3 of 4 pods.
	g.waitFor("paused at weight 25 with the stable side at 3 ready pods", func() (bool, string) {
		e, ok := g.lastEvent()
		d := g.get("web-a")
		g.m.mu.Lock()
		ready := g.m.readyNow(strategy.SideA)
		g.m.mu.Unlock()
		return ok && e.After.Phase == strategy.PhasePaused && g.weights().B == 25 && *d.Spec.Replicas == faultFull-1 && ready == faultFull-1,
			fmt.Sprintf("phase %s, weights %+v, web-a spec %d with %d ready pods", e.After.Phase, g.weights(), *d.Spec.Replicas, ready)
	})
	perNode := map[string]int{}
	g.m.mu.Lock()
	for _, p := range g.m.pods {
		if faultPodSide(p) == strategy.SideA && faultPodReady(p) {
			perNode[p.Spec.NodeName]++
		}
	}
	g.m.mu.Unlock()
	victim := nodes[0]
	if perNode[nodes[1]] > perNode[victim] {
		victim = nodes[1]
	}
	lostAt := time.Now()
	env.Cluster.LoseNode(t, victim)
	restored := false
	t.Cleanup(func() {
		if !restored {
			env.Cluster.RestoreNode(t, victim)
		}
		faultNodeReady(t, env, victim)
	})
	t.Logf("lost %s, which ran %d of the stable pods (%v)", victim, perNode[victim], perNode)

	g.waitFor("Degraded StableReadinessLost", func() (bool, string) {
		e, _ := g.lastEvent()
		return faultDegraded(&e.After) == strategy.ReasonStableReadinessLost, fmt.Sprintf("phase %s, degraded %q: %s", e.After.Phase, faultDegraded(&e.After), e.After.Message)
	})
	g.m.mu.Lock()
	readyAtResume := g.m.readyNow(strategy.SideA)
	g.m.mu.Unlock()
	if readyAtResume >= 3 { // 75 percent: its traffic
		t.Fatalf("Degraded StableReadinessLost with %d stable pods ready", readyAtResume)
	}
	g.commands <- func(s strategy.State, now time.Time) strategy.State { return s.Resume(now) }
	end := g.wait()
	g.checkMonitor()
	if end.Phase != strategy.PhaseSucceeded || end.StableRevision != "v2" || end.StableSide != strategy.SideB {
		t.Errorf("ended %s on %s, side %s: %s; want Succeeded on v2, side B", end.Phase, end.StableRevision, end.StableSide, end.Message)
	}
	g.serves(strategy.SideB)
	// The engine held while it saw the stable side short.
	for _, e := range g.eventsWhere(func(e *rollout.Event) bool { return stableShort(&e.Decision.State.Observed) }) {
		for _, h := range e.Applied {
			if h.Kind == rollout.HopWeight {
				t.Errorf("a weight hop (%s) at %s while the stable side was observed short: %+v", h, e.Time.Format("15:04:05.000"), e.Decision.State.Observed)
			}
		}
	}
	// The stable pods of the lost node were replaced on the other one.
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	replaced := 0
	for _, p := range g.m.seenReady {
		if faultPodSide(p) == strategy.SideA && p.CreationTimestamp.After(lostAt.Add(-time.Second)) && p.Spec.NodeName != victim {
			replaced++
		}
	}
	if replaced == 0 {
		t.Errorf("no stable pod was replaced after %s was lost", victim)
	}
	t.Logf("%d stable pods replaced; stable deficits %+v", replaced, len(g.m.deficits[strategy.SideA]))
}

// faultNodeReady waits until node is Ready, for the tests after this one.
func faultNodeReady(t *testing.T, env *kubetest.Env, node string) {
	t.Helper()
	deadline := time.Now().Add(faultWait)
	for {
		n, err := env.Kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err == nil {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("node %s not Ready again within %v (%v)", node, faultWait, err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The controller manager stopped during a rollout, then restarted: while it
// is stopped no Deployment status moves, so the next write of a side (a
// capacity, or a deploy of a new template at 0 replicas) leaves a spec that
// its controller has not observed (observedGeneration behind the
// generation), while the status still describes the spec before it. The
// Setter and the Deployer must not take that frozen status for the new
// spec's progress: a frozen status at 0 replicas looks exactly like a
// rolled-out new template, and one at the old replica count like a side
// at the old capacity. Every read of that side reports it unsettled (and,
// for the Deployer, not Updated), and the rollout asks for nothing more (no
// weight, no other capacity, no deploy) for several reconciles. (A stop can
// also land after the controller observed a write and before it wrote the
// status that write leads to: the status is then frozen half-way, with
// observedGeneration current, and the same holds: see frozenWrite.) Restarted,
// the controller catches up and the rollout completes. Three stops: before
// the rollout starts (the deploy of v2 on side B is the frozen write), once
// the canary has weight 25 (wherever that lands), and in a pause at weight
// 25 (the canary's next scale-up is the frozen write).
func TestFaultControllerManagerStopped(t *testing.T) {
	paused := strategy.Canary{MaxSurgePercent: faultSurge,
		Steps:   []strategy.CanaryStep{strategy.SetWeight(25), strategy.Pause(5 * time.Second), strategy.SetWeight(50), strategy.SetWeight(75)},
		Options: strategy.Options{PollInterval: metav1.Duration{Duration: 500 * time.Millisecond}}}
	for _, tc := range []struct {
		name  string
		strat strategy.Strategy
		// stopAt waits until the moment to stop; nil: before the start.
		stopAt func(g *faultRig)
		// afterStop: the frozen write must come after the stop (a
		// generation the controller never observes).
		afterStop bool
	}{
		{"before the deploy", faultStrategy(), nil, true},
		// Wherever the stop lands: often after the controller observed
		// the stable side's scale-down and before its status settled.
		{"mid-rollout", faultStrategy(), func(g *faultRig) {
			g.waitFor("canary weight 25", func() (bool, string) { return g.weights().B >= 25, fmt.Sprintf("weights %+v", g.weights()) })
		}, false},
		// In a 5s pause at weight 25, everything settled (the stable
		// side shrunk to its traffic, 75, seen settled): the canary's
		// scale-up to 50 comes after the stop.
		{"in a pause", paused, func(g *faultRig) {
			g.waitFor("paused at weight 25, the stable side settled at 75", func() (bool, string) {
				e, _ := g.lastEvent()
				st := e.After.Observed.Stable
				return e.After.Phase == strategy.PhasePaused && g.weights().B == 25 && st.Capacity == 75 && st.Settled,
					fmt.Sprintf("phase %s, weights %+v, stable %+v", e.After.Phase, g.weights(), st)
			})
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newFaultRig(t, tc.strat, faultSideOptions{}, faultSideOptions{})
			cluster := g.env.Cluster
			restarted := false
			var stoppedAt time.Time
			stop := func() {
				cluster.StopControllerManager(t)
				stoppedAt = time.Now()
				t.Cleanup(func() {
					if !restarted {
						cluster.StartControllerManager(t)
					}
				})
			}
			if tc.stopAt == nil {
				stop()
			}
			g.start()
			if tc.stopAt != nil {
				tc.stopAt(g)
				stop()
			}
			frozen, since, afterStop := g.frozenWrite(stoppedAt)
			// Several reconciles of the frozen world: at least 4, and 3
			// seconds.
			g.waitFor("reconciles while frozen", func() (bool, string) {
				n := len(g.eventsWhere(func(e *rollout.Event) bool { return e.Time.After(since) }))
				return n >= 4 && time.Since(since) >= 3*time.Second, fmt.Sprintf("%d reconciles since %s", n, since.Format("15:04:05.000"))
			})
			g.checkFrozen(frozen, since)
			t.Logf("frozen write: %s on side %s, after the stop: %v", frozen.what, frozen.side, afterStop)
			if tc.afterStop && !afterStop {
				t.Errorf("no write after the stop: the last one, %s on side %s, came before it", frozen.what, frozen.side)
			}
			cluster.StartControllerManager(t)
			restarted = true
			end := g.wait()
			g.checkMonitor()
			if end.Phase != strategy.PhaseSucceeded || end.StableRevision != "v2" || end.StableSide != strategy.SideB {
				t.Errorf("ended %s on %s, side %s: %s; want Succeeded on v2, side B", end.Phase, end.StableRevision, end.StableSide, end.Message)
			}
			g.serves(strategy.SideB)
		})
	}
}

// faultWrite is a write of the Runner to a side: a capacity or a deploy.
type faultWrite struct {
	at   time.Time // when it returned
	side strategy.Side
	what string // "capacity 75", "deploy v2"
}

// frozenWrite returns the write of the Runner that the stopped controller
// (stopped at stoppedAt) leaves unobserved: the first write after the stop
// (its Deployment's generation then stays ahead of observedGeneration),
// or, when none comes within several reconciles, the last write before it
// (the controller stopped before it wrote the status that write leads to:
// observedGeneration may have caught up while replicas did not), and the
// instant from which the reads of its side must report it unsettled.
func (g *faultRig) frozenWrite(stoppedAt time.Time) (frozen faultWrite, since time.Time, afterStop bool) {
	g.t.Helper()
	g.waitFor("a write after the stop, or reconciles without one", func() (bool, string) {
		g.m.mu.Lock()
		defer g.m.mu.Unlock()
		var last faultWrite
		for _, w := range g.m.writes {
			if w.at.After(stoppedAt) {
				frozen, afterStop = w, true
				return true, ""
			}
			last = w
		}
		n := len(g.eventsWhere(func(e *rollout.Event) bool { return e.Time.After(stoppedAt) }))
		if n >= 4 && time.Since(stoppedAt) >= 3*time.Second {
			frozen = last
			return true, ""
		}
		return false, fmt.Sprintf("%d reconciles since the stop", n)
	})
	since = frozen.at
	if !afterStop {
		since = stoppedAt
		return frozen, since, false
	}
	d := g.get(faultSideNames[frozen.side])
	if d.Status.ObservedGeneration >= d.Generation {
		g.t.Errorf("%s: observedGeneration %d, generation %d: the controller observed the spec written after the stop", d.Name, d.Status.ObservedGeneration, d.Generation)
	}
	return frozen, since, true
}

// checkFrozen checks the reads and writes since the frozen write: no
// weight and no other write, and every read of its side since since
// unsettled and not Updated.
func (g *faultRig) checkFrozen(frozen faultWrite, since time.Time) {
	g.t.Helper()
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	reads := 0
	for _, r := range g.m.reads {
		if r.side == frozen.side && r.start.After(since) {
			reads++
			if r.st.Settled {
				g.t.Errorf("side %s read settled (%+v) at %s with its spec unobserved", r.side, r.st, r.start.Format("15:04:05.000"))
			}
		}
	}
	for _, r := range g.m.revReads {
		if r.side == frozen.side && r.at.After(since) && r.rs.Updated {
			g.t.Errorf("side %s read Updated (%+v) at %s with its spec unobserved", r.side, r.rs, r.at.Format("15:04:05.000"))
		}
	}
	for _, w := range g.m.wWrites {
		if w.at.After(frozen.at) {
			g.t.Errorf("weight %+v written at %s, after %s on side %s that the stopped controller never observed",
				w.w, w.at.Format("15:04:05.000"), frozen.what, frozen.side)
		}
	}
	for _, w := range g.m.writes {
		if w.at.After(frozen.at) && (w.side != frozen.side || w.what != frozen.what) {
			g.t.Errorf("%s on side %s written at %s, after %s on side %s that the stopped controller never observed",
				w.what, w.side, w.at.Format("15:04:05.000"), frozen.what, frozen.side)
		}
	}
	if reads == 0 {
		g.t.Errorf("no read of side %s while frozen", frozen.side)
	}
	g.t.Logf("frozen after %s on side %s; %d capacity reads of it, none settled", frozen.what, frozen.side, reads)
}

// kubectl rollout restart of a side mid-rollout (at canary weight 50): what
// kubectl does, a strategic merge patch of the pod template's annotation
// kubectl.kubernetes.io/restartedAt to the current time (RFC 3339). The
// side's Deployment rolls its pods to a new ReplicaSet of the same
// revision. An operator author expects the rollout to treat it as what it
// is, a restart: the side still runs its revision (the Deployer recognises
// the revision from the fields its TemplateFunc sets, the image, and a
// template annotation is not one of them), so there is no walk back, no
// abort and no redeploy; the rollout holds while the side rolls (it is not
// settled), counts only ready pods, and completes.
func TestFaultRolloutRestart(t *testing.T) {
	for _, side := range []strategy.Side{strategy.SideA, strategy.SideB} {
		t.Run("side "+string(side), func(t *testing.T) {
			g := newFaultRig(t, faultStrategy(), faultSideOptions{}, faultSideOptions{})
			g.start()
			g.waitFor("canary weight 50", func() (bool, string) { return g.weights().B >= 50, fmt.Sprintf("weights %+v", g.weights()) })
			name := faultSideNames[side]
			patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, faultRestartedAt, time.Now().Format(time.RFC3339))
			restartedAt := time.Now()
			if _, err := g.env.Kube.AppsV1().Deployments(g.ns).Patch(t.Context(), name, types.StrategicMergePatchType, []byte(patch),
				metav1.PatchOptions{FieldManager: "kubectl-rollout"}); err != nil {
				t.Fatal(err)
			}
			end := g.wait()
			g.checkMonitor()
			if end.Phase != strategy.PhaseSucceeded || end.StableRevision != "v2" || end.StableSide != strategy.SideB || end.Aborted != nil {
				t.Errorf("ended %s (aborted %+v) on %s, side %s: %s; want Succeeded on v2, side B", end.Phase, end.Aborted, end.StableRevision, end.StableSide, end.Message)
			}
			g.serves(strategy.SideB)
			g.m.mu.Lock()
			defer g.m.mu.Unlock()
			if !slices.Equal(g.m.deploys, []string{"v2 on B"}) {
				t.Errorf("deploys %v, want v2 on B once", g.m.deploys)
			}
			rolling, restarted := 0, 0
			for _, r := range g.m.revReads {
				if r.side != side || r.at.Before(restartedAt) {
					continue
				}
				if r.rs.Revision != faultRevisions[side] {
					t.Errorf("side %s read running %q at %s after the restart, want %s", side, r.rs.Revision, r.at.Format("15:04:05.000"), faultRevisions[side])
				}
				if !r.rs.Updated {
					rolling++
				}
			}
			for _, p := range g.m.seenReady {
				if faultPodSide(p) == side && p.Annotations[faultRestartedAt] != "" {
					restarted++
				}
			}
			if restarted == 0 {
				t.Errorf("no pod of the restarted template of %s was ever ready", name)
			}
			t.Logf("%d restarted pods of %s ready; %d revision reads saw it rolling", restarted, name, rolling)
		})
	}
}
