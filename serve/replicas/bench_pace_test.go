package replicas_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/kubetest/gatewaytest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// BenchmarkCanaryPace measures what one rollout costs, in time and in
// surge, on the whole cluster (kubetest.ClusterOptions: the real Deployment
// and ReplicaSet controllers and scheduler, kwok's simulated nodes). Each
// run has a namespace of its own: web-a runs v1 at 10 replicas, web-b
// nothing, each pod ready 1 s after it starts (kubetest.AnnotationReadyAfter);
// the gateway Router on the HTTPRoute, a Setter and a Deployer per
// Deployment (the managed capacity mode) and the state on the route (the
// Router's AnnotationStore), all notifying rollout.Runner.Run, as the
// notify variant of BenchmarkUpgradeOnKube. The data plane is
// gatewaytest.Play with a Delay of 500 ms: a generation of the route is
// accepted, and its weights in force, half a second after it is written.
// The rollout to v2 on web-b starts at the trigger and ends when Run
// returns Succeeded with v2 serving all traffic at 10 replicas.
//
// Watches of the route and of the pods of both Deployments, started before
// the trigger, give the timelines the figures come from, in the
// benchmark's own clock (the instant each event arrived):
//   - trigger-s: trigger -> Run returned Succeeded;
//   - ramp-s: the first instant a canary weight above 0 was in force in the
//     data plane (a generation accepted, seen by the route's watch) to the
//     instant weight 100 was; ramp-ratio against the least the strategy
//     allows, the sum of its waits between the first and the last weight
//     (from strategy.Plan: 45 s for both sub-benchmarks), and
//     ramp-ratio-lag against that plus one data-plane delay (0.5 s) per
//     weight step after the first (49.5 s);
//   - pod-s-above-full: the integral over time of max(0, pods - 10), all
//     pods of both Deployments counted from their creation until the watch
//     sees them deleted from the API server; pod-s-above-full-live counts
//     a pod only until the watch sees its deletionTimestamp set. The
//     server's creationTimestamp has whole seconds: a pod is created at
//     the watch's first sight of it when that comes within the second
//     after its creationTimestamp (as it does, within milliseconds, for
//     every pod created once the watch runs), else a second after its
//     creationTimestamp; pod-s-above-full-cts counts from
//     creationTimestamp itself, up to a second early per pod;
//   - beyond-ready-s and beyond-ready-max-pts: how long the weights in
//     force sent a side more than its ready share (canary weight w above
//     10 per ready pod of web-b, or 100 - w above 10 per ready pod of
//     web-a; a pod counts as ready from the watch event showing its Ready
//     condition True until the one showing its deletionTimestamp set), and
//     the largest excess in percentage points;
//   - writes and reads: the API requests of the adapters and the Store
//     during the rollout (requestCounts; watches are logged).
//
// It logs strategy.Plan of each strategy and, per run, the merged
// timeline, relative to the trigger: every reconcile's hops and each change
// of what the Runner observed (the Observer's events), each generation in
// force in the data plane, each change of the pod counts; then how long
// each hop took to be observed done.
//
// The sub-benchmarks run one after the other, about 70 s each; run them
// once (from the repository root, through go.work):
//
//	go test -run X -bench CanaryPace -benchtime 1x -v ./serve/replicas
//
// Without -v the testing package cuts a benchmark's log after 10 lines:
// the figures are logged first.
func BenchmarkCanaryPace(b *testing.B) {
	ctrllog.SetLogger(logr.Discard()) // the Router's client would otherwise warn, with a stack, after 30s
	env := kubetest.Get(b)
	if env.Cluster == nil {
		b.Fatal("the benchmark needs the whole cluster: TestMain must pass kubetest.Options.Cluster")
	}
	const wait = 5 * time.Second
	var steps []strategy.CanaryStep
	for w := int32(10); w <= 90; w += 10 {
		steps = append(steps, strategy.SetWeight(w), strategy.Pause(wait))
	}
	for _, bc := range []struct {
		name  string
		strat strategy.Strategy
	}{
		{"Canary", strategy.Canary{Steps: steps, MaxSurgePercent: 10}},
		{"Incremental", strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: wait}, MaxSurgePercent: 10}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			plan, err := strategy.Plan(bc.strat, strategy.PlanOptions{Start: t0})
			if err != nil {
				b.Fatal(err)
			}
			least, moves := plannedRamp(plan)
			if moves == 0 {
				b.Fatal("the plan moves no weight")
			}
			leastLag := least + time.Duration(moves-1)*paceDataPlaneDelay
			var rs []paceResult
			for b.Loop() {
				rs = append(rs, paceOnKube(b, env, bc.strat))
			}
			// Without -v the benchmark's log is cut after 10 lines: the
			// figures first, then the plan and the timelines.
			for i, r := range rs {
				b.Logf("run %d: %s", i+1, r.summary)
			}
			b.Logf("plan: %v, %d hops, peak capacity %d%%; ramp %v over %d weights (%v with %v of data-plane delay per step after the first):\n%s",
				plan.Duration, plan.Hops, plan.PeakCapacity, least, moves, leastLag, paceDataPlaneDelay, planLines(plan))
			for i, r := range rs {
				b.Logf("run %d, from the trigger:\n%s", i+1, r.detail)
			}
			mean := func(f func(paceResult) float64) float64 {
				sum := 0.0
				for _, r := range rs {
					sum += f(r)
				}
				return sum / float64(len(rs))
			}
			b.ReportMetric(mean(func(r paceResult) float64 { return r.took.Seconds() }), "trigger-s")
			b.ReportMetric(mean(func(r paceResult) float64 { return r.ramp.Seconds() }), "ramp-s")
			b.ReportMetric(mean(func(r paceResult) float64 { return float64(r.ramp) / float64(least) }), "ramp-ratio")
			b.ReportMetric(mean(func(r paceResult) float64 { return float64(r.ramp) / float64(leastLag) }), "ramp-ratio-lag")
			b.ReportMetric(mean(func(r paceResult) float64 { return r.aboveFull }), "pod-s-above-full")
			b.ReportMetric(mean(func(r paceResult) float64 { return r.aboveFullLive }), "pod-s-above-full-live")
			b.ReportMetric(mean(func(r paceResult) float64 { return r.aboveFullCTS }), "pod-s-above-full-cts")
			b.ReportMetric(mean(func(r paceResult) float64 { return r.beyondReady.Seconds() }), "beyond-ready-s")
			b.ReportMetric(mean(func(r paceResult) float64 { return float64(r.beyondMax) }), "beyond-ready-max-pts")
			b.ReportMetric(mean(func(r paceResult) float64 { return float64(r.writes) }), "writes")
			b.ReportMetric(mean(func(r paceResult) float64 { return float64(r.reads) }), "reads")
		})
	}
}

const (
	// paceReadyDelay is how long the benchmark's pods take to become
	// ready once started.
	paceReadyDelay = time.Second
	// paceDataPlaneDelay is how long the simulated gateway takes to accept
	// a generation of the route.
	paceDataPlaneDelay = 500 * time.Millisecond
	// paceTimeout bounds one rollout, and the wait for its pods to settle.
	paceTimeout = 4 * time.Minute
)

// plannedRamp returns the time plan takes from the first canary weight
// above 0 to weight 100, and how many weights it sets on the way (the
// first and the last included).
func plannedRamp(plan strategy.Timeline) (time.Duration, int) {
	w := plan.Initial.Weight
	var first time.Duration
	moves := 0
	for _, e := range plan.Entries {
		if e.Allocation.Weight == w {
			continue
		}
		w = e.Allocation.Weight
		if moves == 0 && w > 0 {
			first = e.Offset
		}
		if moves > 0 || w > 0 {
			moves++
		}
		if w == 100 {
			return e.Offset - first, moves
		}
	}
	return 0, 0
}

func planLines(plan strategy.Timeline) string {
	var sb strings.Builder
	for _, e := range plan.Entries {
		a := e.Allocation
		fmt.Fprintf(&sb, "\t%8v %-24s weight %3d, stable %3d%%, canary %3d%% (%s)\n", e.Offset, e.What, a.Weight, a.StableCapacity, a.CanaryCapacity, e.Phase)
	}
	return sb.String()
}

// paceResult is what one rollout of BenchmarkCanaryPace cost.
type paceResult struct {
	took                     time.Duration // trigger -> Run returned
	ramp                     time.Duration
	aboveFull, aboveFullLive float64 // pod-seconds
	aboveFullCTS             float64
	beyondReady              time.Duration
	beyondMax                int32
	reads, writes            int64
	// summary and detail are the log of the run: its figures, and its
	// timeline.
	summary, detail string
}

// paceOnKube runs one rollout to v2 on web-b in a new namespace, and
// measures it from the watches' timelines.
func paceOnKube(b *testing.B, env *kubetest.Env, strat strategy.Strategy) paceResult {
	b.Helper()
	ns := env.Namespace(b)
	createSides(b, env, ns, map[string]string{kubetest.AnnotationReadyAfter: paceReadyDelay.String()})
	rec := recordPace(b, env, ns)
	defer rec.stop()
	player := gatewaytest.Play(b, env.Gateway, ns, gatewaytest.PlayerOptions{Delay: paceDataPlaneDelay})
	defer player.Stop()

	var mu sync.Mutex
	var events []paceEvent
	rig := newKubeRig(b, env, ns, strat, true, rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
		mu.Lock()
		events = append(events, paceEvent{Event: e, done: time.Now()})
		mu.Unlock()
	}))
	ctx, cancel := context.WithTimeout(context.Background(), paceTimeout)
	defer cancel()
	start := time.Now()
	s := strategy.State{}.Retarget("v1", start).Retarget("v2", start)
	s, err := rig.runner.Run(ctx, s, nil)
	took := time.Since(start)
	rig.checkUpgraded(b, s, err, took)
	if errs := player.Errors(); len(errs) > 0 {
		b.Fatalf("the simulated gateway failed to write statuses: %v", errs)
	}
	// The rollout is done; its pods may still be going away.
	end := rec.waitSettled(b)
	rec.stop()

	mu.Lock()
	defer mu.Unlock()
	tl := rec.timeline(b, start, end)
	r := paceResult{took: took, reads: rig.counts.reads.Load(), writes: rig.counts.writes.Load(),
		aboveFull: tl.aboveFull, aboveFullLive: tl.aboveFullLive, aboveFullCTS: tl.aboveFullCTS, beyondReady: tl.beyondReady, beyondMax: tl.beyondMax}
	first, last, ok := tl.ramp()
	if !ok {
		b.Fatalf("the data plane never had a canary weight above 0 and then 100 in force:\n%s", tl.lines(start, nil))
	}
	r.ramp = last.Sub(first)

	var sb strings.Builder
	hops := 0
	for _, e := range events {
		hops += len(e.Applied)
	}
	fmt.Fprintf(&sb, "trigger -> Succeeded %v; %d reconciles, %d hops, %d saves; %d reads (%d of them the adapters'), %d writes (%d refused with a conflict), %d watches; the gateway wrote %d statuses (%d conflicts)\n",
		took.Round(time.Millisecond), len(events), hops, rig.store.saves.Load(), r.reads, rig.adapterReads(), r.writes, rig.counts.conflicts.Load(),
		rig.counts.watches.Load(), player.Written(), player.Conflicts())
	fmt.Fprintf(&sb, "ramp %v (first canary weight in force at %s, 100 at %s); peak %d pods (%d from creationTimestamp); pod-seconds above full %.2f (%.2f until the deletionTimestamp, %.2f from creationTimestamp); beyond ready %v (at most %d points)",
		r.ramp.Round(time.Millisecond), rel(first, start), rel(last, start), tl.peak, tl.peakCTS, tl.aboveFull, tl.aboveFullLive, tl.aboveFullCTS,
		tl.beyondReady.Round(time.Millisecond), tl.beyondMax)
	r.summary = sb.String()
	r.detail = tl.lines(start, events) + hopLags(events, tl, start)
	return r
}

// paceEvent is an Observer event and when the Observer got it (after the
// reconcile's hops; Time is when the reconcile began).
type paceEvent struct {
	rollout.Event
	done time.Time
}

// paceRecorder records, as they arrive, the events of informers on the
// route and on the pods of both Deployments.
type paceRecorder struct {
	stopOnce sync.Once
	stopCh   chan struct{}
	shutdown func()

	mu     sync.Mutex
	pods   []podSighting
	routes []routeSighting
	// present are the pods the informer holds, by UID.
	present map[string]*corev1.Pod
	route   *gwv1.HTTPRoute
}

type podSighting struct {
	at   time.Time
	pod  *corev1.Pod
	gone bool // deleted from the API server
}

type routeSighting struct {
	at    time.Time
	route *gwv1.HTTPRoute
}

func recordPace(tb testing.TB, env *kubetest.Env, ns string) *paceRecorder {
	tb.Helper()
	r := &paceRecorder{stopCh: make(chan struct{}), present: map[string]*corev1.Pod{}}
	kf := informers.NewSharedInformerFactoryWithOptions(env.Kube, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app in (web-a,web-b)" }))
	pods := kf.Core().V1().Pods().Informer()
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.pod(obj, false) },
		UpdateFunc: func(_, obj any) { r.pod(obj, false) },
		DeleteFunc: func(obj any) { r.pod(obj, true) },
	}); err != nil {
		tb.Fatal(err)
	}
	gf := gwinformers.NewSharedInformerFactoryWithOptions(env.Gateway, 0, gwinformers.WithNamespace(ns),
		gwinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", "web").String()
		}))
	routes := gf.Gateway().V1().HTTPRoutes().Informer()
	if _, err := routes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.routeChanged,
		UpdateFunc: func(_, obj any) { r.routeChanged(obj) },
	}); err != nil {
		tb.Fatal(err)
	}
	kf.Start(r.stopCh)
	gf.Start(r.stopCh)
	r.shutdown = func() { kf.Shutdown(); gf.Shutdown() }
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, routes.HasSynced) {
		r.stop()
		tb.Fatal("the benchmark's informers did not sync")
	}
	return r
}

func (r *paceRecorder) stop() {
	r.stopOnce.Do(func() {
		close(r.stopCh)
		r.shutdown()
	})
}

func (r *paceRecorder) pod(obj any, gone bool) {
	at := time.Now()
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pods = append(r.pods, podSighting{at: at, pod: p, gone: gone})
	if gone {
		delete(r.present, string(p.UID))
	} else {
		r.present[string(p.UID)] = p
	}
}

func (r *paceRecorder) routeChanged(obj any) {
	at := time.Now()
	rt, ok := obj.(*gwv1.HTTPRoute)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routes = append(r.routes, routeSighting{at: at, route: rt})
	r.route = rt
}

// waitSettled waits until the watches show the end of the rollout: no pod
// of web-a left, 10 ready pods of web-b, weight 100 in force on web-b. It
// returns when they first showed it.
func (r *paceRecorder) waitSettled(tb testing.TB) time.Time {
	tb.Helper()
	deadline := time.Now().Add(paceTimeout)
	for {
		r.mu.Lock()
		var a, bReady int
		for _, p := range r.present {
			switch p.Labels["app"] {
			case "web-a":
				a++
			case "web-b":
				if podReady(p) && p.DeletionTimestamp == nil {
					bReady++
				}
			}
		}
		done := a == 0 && bReady == fullReplicas && r.route != nil && gatewaytest.Accepted(r.route) &&
			routeWeights(r.route) == rollout.Weights{B: 100}
		var last time.Time
		if len(r.pods) > 0 {
			last = r.pods[len(r.pods)-1].at
		}
		if len(r.routes) > 0 && r.routes[len(r.routes)-1].at.After(last) {
			last = r.routes[len(r.routes)-1].at
		}
		r.mu.Unlock()
		if done {
			return last
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after %v the watches show %d pods of web-a, %d ready of web-b, route %v", paceTimeout, a, bReady, r.route != nil)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// paceTimeline is the analysis of a paceRecorder's sightings.
type paceTimeline struct {
	marks []paceMark // in time order
	// inForce is every generation of the route in force in the data plane:
	// each accepted generation, from the sighting of its acceptance.
	inForce []generationInForce

	aboveFull, aboveFullLive, aboveFullCTS float64
	peak, peakCTS                          int
	beyondReady                            time.Duration
	beyondMax                              int32
}

type generationInForce struct {
	at         time.Time
	generation int64
	weights    rollout.Weights
}

// paceMark is one change of a paceState.
type paceMark struct {
	at    time.Time
	apply func(*paceState)
	what  string // for the timeline: "" for a pod's change, shown by the counts
}

// paceState is the world at one instant, by side (0 web-a, 1 web-b).
type paceState struct {
	pods  [2]int // from creation until gone from the API server
	live  [2]int // from creation until the deletionTimestamp is seen
	cts   [2]int // from creationTimestamp until gone
	ready [2]int // Ready and not being deleted
	// weight is the canary's (web-b's) weight in force in the data plane.
	weight int32
}

// beyond is how many percentage points of traffic the weight in force
// sends beyond the ready share of a side: 10 points per ready pod.
func (s *paceState) beyond() int32 {
	const share = 100 / fullReplicas
	return max(0, s.weight-share*int32(s.ready[1]), 100-s.weight-share*int32(s.ready[0]))
}

func sideIndex(p *corev1.Pod) int {
	if p.Labels["app"] == "web-b" {
		return 1
	}
	return 0
}

// timeline turns the sightings into marks and integrates them over [from,
// to].
func (r *paceRecorder) timeline(tb testing.TB, from, to time.Time) *paceTimeline {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	tl := &paceTimeline{}
	add := func(at time.Time, what string, f func(*paceState)) {
		tl.marks = append(tl.marks, paceMark{at: at, apply: f, what: what})
	}
	// Pods: each one's sightings, in the order they came.
	type podTrack struct {
		side                  int
		deleting, gone, ready bool
	}
	tracks := map[string]*podTrack{}
	for _, s := range r.pods {
		p, uid := s.pod, string(s.pod.UID)
		t := tracks[uid]
		if t == nil {
			t = &podTrack{side: sideIndex(p)}
			tracks[uid] = t
			side := t.side
			cts := p.CreationTimestamp.Time
			add(minTime(s.at, cts.Add(time.Second)), "", func(st *paceState) { st.pods[side]++; st.live[side]++ })
			add(cts, "", func(st *paceState) { st.cts[side]++ })
		}
		if t.gone {
			continue
		}
		side := t.side
		if (s.gone || p.DeletionTimestamp != nil) && !t.deleting {
			t.deleting = true
			add(s.at, "", func(st *paceState) { st.live[side]-- })
		}
		if ready := podReady(p) && !t.deleting; ready != t.ready {
			t.ready = ready
			d := 1
			if !ready {
				d = -1
			}
			add(s.at, "", func(st *paceState) { st.ready[side] += d })
		}
		if s.gone {
			t.gone = true
			add(s.at, "", func(st *paceState) { st.pods[side]--; st.cts[side]-- })
		}
	}
	// The route: the weights of each generation accepted, from the
	// sighting of its acceptance.
	var gen int64
	for _, s := range r.routes {
		rt := s.route
		if !gatewaytest.Accepted(rt) || rt.Generation <= gen {
			continue
		}
		gen = rt.Generation
		w := routeWeights(rt)
		if w.A+w.B != 100 {
			tb.Fatalf("generation %d of the route in force with weights %+v", gen, w)
		}
		tl.inForce = append(tl.inForce, generationInForce{at: s.at, generation: gen, weights: w})
		add(s.at, fmt.Sprintf("data plane: generation %d in force, A=%d B=%d", gen, w.A, w.B), func(st *paceState) { st.weight = w.B })
	}
	slices.SortStableFunc(tl.marks, func(a, b paceMark) int { return a.at.Compare(b.at) })

	// Integrate over [from, to]: each state holds from its mark to the
	// next one.
	var st paceState
	for i, m := range tl.marks {
		m.apply(&st)
		next := to
		if i+1 < len(tl.marks) {
			next = tl.marks[i+1].at
		}
		lo, hi := maxTime(m.at, from), minTime(next, to)
		if !hi.After(lo) {
			continue
		}
		dt := hi.Sub(lo)
		pods, live, cts := st.pods[0]+st.pods[1], st.live[0]+st.live[1], st.cts[0]+st.cts[1]
		tl.peak, tl.peakCTS = max(tl.peak, pods), max(tl.peakCTS, cts)
		tl.aboveFull += float64(max(0, pods-fullReplicas)) * dt.Seconds()
		tl.aboveFullLive += float64(max(0, live-fullReplicas)) * dt.Seconds()
		tl.aboveFullCTS += float64(max(0, cts-fullReplicas)) * dt.Seconds()
		if x := st.beyond(); x > 0 {
			tl.beyondReady += dt
			tl.beyondMax = max(tl.beyondMax, x)
		}
	}
	if n := st.pods[0] + st.pods[1]; n != fullReplicas || st.weight != 100 {
		tb.Fatalf("the timeline ends with %d pods, canary weight %d in force", n, st.weight)
	}
	return tl
}

// ramp returns when the first canary weight above 0, and then weight 100,
// came in force.
func (tl *paceTimeline) ramp() (first, last time.Time, ok bool) {
	for _, g := range tl.inForce {
		if g.weights.B > 0 && first.IsZero() {
			first = g.at
		}
		if g.weights.B == 100 && !first.IsZero() {
			return first, g.at, true
		}
	}
	return first, last, false
}

// lines renders the timeline from the trigger on, merged with the
// Runner's events: its hops, and each change of what it observed.
func (tl *paceTimeline) lines(start time.Time, events []paceEvent) string {
	type line struct {
		at   time.Time
		text string
	}
	var ls []line
	var st paceState
	prev := ""
	counts := func() string {
		c := fmt.Sprintf("pods: web-a %d (ready %d), web-b %d (ready %d); %d in all",
			st.pods[0], st.ready[0], st.pods[1], st.ready[1], st.pods[0]+st.pods[1])
		if x := st.beyond(); x > 0 {
			c += fmt.Sprintf("; %d points beyond ready", x)
		}
		return c
	}
	begun := false
	for i, m := range tl.marks {
		if !begun && !m.at.Before(start) {
			// The world at the trigger, what came before folded in.
			begun = true
			prev = counts()
			ls = append(ls, line{start, fmt.Sprintf("trigger: canary weight %d in force; %s", st.weight, prev)})
		}
		m.apply(&st)
		if !begun || i+1 < len(tl.marks) && tl.marks[i+1].at.Equal(m.at) {
			continue // one line per instant
		}
		if m.what != "" {
			ls = append(ls, line{m.at, m.what})
		}
		if c := counts(); c != prev {
			prev = c
			ls = append(ls, line{m.at, c})
		}
	}
	prev = ""
	for _, e := range events {
		if len(e.Applied) > 0 {
			hs := make([]string, len(e.Applied))
			for i, h := range e.Applied {
				hs[i] = h.String()
			}
			ls = append(ls, line{e.Time, "runner: " + strings.Join(hs, "; ") + fmt.Sprintf(" (written by %s)", rel(e.done, start))})
		}
		if e.After.Phase != e.Before.Phase {
			from := string(e.Before.Phase)
			if from == "" {
				from = "(none)"
			}
			ls = append(ls, line{e.Time, fmt.Sprintf("runner: phase %s -> %s", from, e.After.Phase)})
		}
		if e.Err != nil {
			ls = append(ls, line{e.Time, fmt.Sprintf("runner: error: %v", e.Err)})
		}
		if o := observed(e.After); o != prev {
			prev = o
			ls = append(ls, line{e.Time, "runner observes: " + o})
		}
	}
	slices.SortStableFunc(ls, func(a, b line) int { return a.at.Compare(b.at) })
	var sb strings.Builder
	for _, l := range ls {
		fmt.Fprintf(&sb, "\t%s %s\n", rel(l.at, start), l.text)
	}
	return sb.String()
}

// sideObserved is what the state's observation says of side.
func sideObserved(s strategy.State, side strategy.Side) strategy.SideObservation {
	stable := s.StableSide
	if stable == "" {
		stable = strategy.SideA
	}
	if side == stable {
		return s.Observed.Stable
	}
	return s.Observed.Canary
}

// weightObservedB is the weight of side B the state's observation says
// the router holds.
func weightObservedB(s strategy.State) int32 {
	if s.StableSide == strategy.SideB {
		return 100 - s.Observed.Weight
	}
	return s.Observed.Weight
}

// observed renders what the Runner observed, by side.
func observed(s strategy.State) string {
	applied := "applied"
	if !s.Observed.WeightApplied {
		applied = "not applied yet"
	}
	side := func(x strategy.Side) string {
		o := sideObserved(s, x)
		settled := ""
		if !o.Settled {
			settled = ", moving"
		}
		return fmt.Sprintf("capacity %d ready %d%s", o.Capacity, o.Ready, settled)
	}
	return fmt.Sprintf("B weight %d %s; A %s; B %s", weightObservedB(s), applied, side(strategy.SideA), side(strategy.SideB))
}

// hopLags renders how long each hop took to be observed done by the
// Runner: a capacity, its side settled at it (every pod asked for ready,
// none other left); a weight, applied (and, from the route's watch, in
// force in the data plane).
func hopLags(events []paceEvent, tl *paceTimeline, start time.Time) string {
	var sb strings.Builder
	type sum struct {
		n        int
		sum, top time.Duration
	}
	sums := map[string]*sum{}
	note := func(kind string, d time.Duration) {
		s := sums[kind]
		if s == nil {
			s = &sum{}
			sums[kind] = s
		}
		s.n++
		s.sum += d
		s.top = max(s.top, d)
	}
	sb.WriteString("hops, from their reconcile to the Runner observing them done:\n")
	for i, e := range events {
		for _, h := range e.Applied {
			var kind string
			var done func(strategy.State) bool
			switch h.Kind {
			case rollout.HopCapacity:
				// After.Observed is this reconcile's observation, taken
				// before its hops.
				dir := "scale-down"
				if h.Steady {
					dir = "steady"
				} else if h.Value > sideObserved(e.After, h.Side).Capacity {
					dir = "scale-up"
				}
				kind = h.Role + " " + dir
				done = func(s strategy.State) bool {
					o := sideObserved(s, h.Side)
					return o.Settled && o.Capacity == h.Value
				}
			case rollout.HopWeight:
				kind = "weight"
				done = func(s strategy.State) bool { return s.Observed.WeightApplied && weightObservedB(s) == h.Weights.B }
			default:
				kind = string(h.Kind)
				done = func(s strategy.State) bool { return sideObserved(s, h.Side).RunsRevision(h.Revision) }
			}
			seen := "never"
			for _, later := range events[i+1:] {
				if done(later.After) {
					d := later.Time.Sub(e.Time)
					note(kind, d)
					seen = "+" + d.Round(time.Millisecond).String()
					break
				}
			}
			extra := ""
			if h.Kind == rollout.HopWeight {
				for _, g := range tl.inForce {
					if g.at.After(e.Time) && g.weights == h.Weights {
						d := g.at.Sub(e.Time)
						note("weight in force", d)
						extra = fmt.Sprintf(", in force in the data plane +%v", d.Round(time.Millisecond))
						break
					}
				}
			}
			fmt.Fprintf(&sb, "\t%s %-36s observed done %s%s\n", rel(e.Time, start), h.String(), seen, extra)
		}
	}
	kinds := make([]string, 0, len(sums))
	for k := range sums {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		s := sums[k]
		fmt.Fprintf(&sb, "%s: %d, mean %v, max %v\n", k, s.n, (s.sum / time.Duration(s.n)).Round(time.Millisecond), s.top.Round(time.Millisecond))
	}
	// The gaps between weights in force: the strategy's wait and the rest.
	var gaps []string
	for i := 1; i < len(tl.inForce); i++ {
		if tl.inForce[i].weights.B > 0 && tl.inForce[i-1].weights.B > 0 {
			gaps = append(gaps, fmt.Sprintf("%d->%d %v", tl.inForce[i-1].weights.B, tl.inForce[i].weights.B,
				tl.inForce[i].at.Sub(tl.inForce[i-1].at).Round(time.Millisecond)))
		}
	}
	fmt.Fprintf(&sb, "between canary weights in force: %s\n", strings.Join(gaps, ", "))
	return sb.String()
}

// rel renders at relative to the trigger: "+12.345s".
func rel(at, start time.Time) string {
	return fmt.Sprintf("%+8.3fs", at.Sub(start).Seconds())
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
