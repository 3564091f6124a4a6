package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// fuzzStrategies are the strategies FuzzAnnotationStoreReconcile picks from:
// the three strategies in the managed capacity mode, with each abort ramp
// (AbortEmergency included), and in the fixed mode with a Router only.
var fuzzStrategies = []strategy.Strategy{
	strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 20},
	strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 25,
		Options: strategy.Options{AbortRamp: strategy.AbortGradual, AbortOnProgressDeadline: true}},
	strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30,
		Options: strategy.Options{AbortRamp: strategy.AbortEmergency, UnhealthyThreshold: 1}},
	strategy.Canary{Steps: fuzzSteps, MaxSurgePercent: 30},
	strategy.Canary{Steps: fuzzSteps, MaxSurgePercent: 10,
		Options: strategy.Options{AbortRamp: strategy.AbortGradual, UnhealthyThreshold: 1, AbortOnProgressDeadline: true}},
	strategy.BlueGreen{},
	strategy.BlueGreen{Options: strategy.Options{AbortRamp: strategy.AbortEmergency, AbortOnProgressDeadline: true}},
	strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, Options: strategy.Options{Capacity: strategy.CapacityFixed}},
	strategy.Canary{Steps: fuzzSteps, Options: strategy.Options{Capacity: strategy.CapacityFixed, AbortRamp: strategy.AbortEmergency}},
	strategy.BlueGreen{Options: strategy.Options{Capacity: strategy.CapacityFixed, AbortRamp: strategy.AbortGradual}},
}

var fuzzSteps = []strategy.CanaryStep{
	strategy.SetWeight(20), strategy.Pause(time.Minute), strategy.SetWeight(50),
	strategy.Gate("smoke"), strategy.SetWeight(30), strategy.PauseUntilResumed(),
}

// Bits of the flags input of FuzzAnnotationStoreReconcile.
const (
	fuzzStatusMask = 3 // the route's parent status: see fuzzRoute
	fuzzUnhealthy  = 4 // both sides report Unhealthy (read for the canary)
)

// fuzzRouteGeneration is the managed route's metadata.generation.
const fuzzRouteGeneration = 3

// fuzzRoute is the managed route: one rule split between stable (side A)
// and canary (side B) with the given weights, the state annotation holding
// raw, and a parent status chosen by status: 0 none yet, 1 Accepted and
// ResolvedRefs for the current generation, 2 both for an older generation,
// 3 Accepted False for the current generation.
func fuzzRoute(raw string, wa, wb int32, status uint8) *gwv1.HTTPRoute {
	rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: "shop", Name: "web", Gateway: "gw", A: stable, B: canary})
	if err != nil {
		panic(err)
	}
	rt.Generation = fuzzRouteGeneration
	rt.Annotations = map[string]string{gateway.StateAnnotation: raw}
	refs := rt.Spec.Rules[0].BackendRefs
	refs[0].Weight, refs[1].Weight = &wa, &wb
	if status == 0 {
		return rt
	}
	gen, accepted := int64(fuzzRouteGeneration), metav1.ConditionTrue
	switch status {
	case 2:
		gen--
	case 3:
		accepted = metav1.ConditionFalse
	}
	ps := gwv1.RouteParentStatus{ParentRef: rt.Spec.ParentRefs[0], ControllerName: "example.com/gateway"}
	for _, c := range []struct {
		typ    gwv1.RouteConditionType
		status metav1.ConditionStatus
	}{{gwv1.RouteConditionAccepted, accepted}, {gwv1.RouteConditionResolvedRefs, metav1.ConditionTrue}} {
		ps.Conditions = append(ps.Conditions, metav1.Condition{Type: string(c.typ), Status: c.status, Reason: string(c.typ),
			ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(t0)})
	}
	rt.Status.Parents = []gwv1.RouteParentStatus{ps}
	return rt
}

var fuzzScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := gwv1.Install(s); err != nil {
		panic(err)
	}
	return s
}()

// fuzzWalk steps strat n times from NewState("v1", "v2"), one minute
// apart and ending a minute before t0, in a world that applies every hop at
// once: gates pass, pauses until Resume are resumed. Before step at, cmd
// (when set) is applied. The states it passes through are valid.
func fuzzWalk(strat strategy.Strategy, n, at int, cmd rollout.Command) strategy.State {
	s := strategy.NewState("v1", "v2")
	now := t0.Add(-time.Duration(n) * time.Minute)
	for i := range n {
		if i == at && cmd != nil {
			s = cmd(s, now)
		}
		if s.AwaitingResume {
			s = s.Resume(now)
		}
		s = strat.Step(s, now).State
		d := s.Desired
		s.Observed = strategy.Observation{
			At: metav1.NewMicroTime(now), Weight: d.Weight, WeightApplied: true,
			Stable: strategy.SideObservation{Capacity: d.StableCapacity, Ready: d.StableCapacity, Settled: true},
			Canary: strategy.SideObservation{Capacity: d.CanaryCapacity, Ready: d.CanaryCapacity, Settled: true},
		}
		if s.Gate != "" {
			s.Observed.Gates = []strategy.GateResult{{Name: s.Gate, Verdict: strategy.VerdictPass, At: metav1.NewMicroTime(now)}}
		}
		now = now.Add(time.Minute)
	}
	return s
}

// FuzzAnnotationStoreReconcile loads a rollout state from the annotation of
// a managed route (any bytes: the annotation is user-writable) with the
// AnnotationStore and reconciles it once with the Runner, the gateway Router
// and fake capacity, in a world picked by the other inputs: the strategy,
// the route's weights (valid splits of 100 or not) and parent status, and
// each side's replicas and capacity, hence its ready share.
//
// It checks rules 1 to 5 of the strategy package documentation (# Invariants,
// the capacity-safe mover), and what the Runner and the AnnotationStore promise:
//   - nothing panics; a Load that fails returns a Permanent error naming
//     the annotation, never rollout.ErrNotFound (the annotation is there);
//   - an idle state reads and writes no adapter;
//   - a state that fails strategy.State.Validate writes nothing (route and
//     both capacities unchanged) and, unless idle, the Runner returns a
//     *strategy.StateError;
//   - otherwise every hop is safe: weights written sum to 100; a side's
//     share of the traffic rises only up to its ready capacity observed
//     before the reconcile (rule 1), except the stable side during an
//     emergency abort (the documented exception); in the managed mode no
//     side is scaled down below the traffic it carries afterwards (rule 3).
//
// The route lives in an in-memory client (sigs.k8s.io/controller-runtime's
// fake), which keeps a route's generation when it is written; one reconcile
// reads the status only before it writes, so that does not matter here. It
// is built with the deduced type converter only, which keeps an input well
// under a millisecond.
func FuzzAnnotationStoreReconcile(f *testing.F) {
	// world holds the inputs after raw, each taken modulo its range.
	type world struct {
		strat uint8 // an index into fuzzStrategies
		flags uint8 // fuzzStatusMask, fuzzUnhealthy
		// The route's weights for A and B: weightB 0..100; weightA 0..100,
		// or above 100 for 100 - weightB.
		weightB, weightA uint8
		// Each side's replicas 0..10 (0 is 1) and capacity percent 0..100.
		aReplicas, aPct uint8
		bReplicas, bPct uint8
	}
	add := func(raw string, w world) {
		f.Add(raw, w.strat, w.flags, w.weightB, w.weightA, w.aReplicas, w.aPct, w.bReplicas, w.bPct)
	}
	fresh := world{flags: 1, weightA: 255, aReplicas: 10, aPct: 100, bReplicas: 10}
	for _, raw := range []string{
		"null", "", "{}", "[1,2]", `{"desired":"x"}`, `{"startedAt":"yesterday"}`, "\x00\xff{not json",
		`{"phase":"Bogus","desired":{"weight":500}}`,
		`{"stableRevision":"v1","canaryRevision":"v1","desired":{"weight":80}}`,
		`{"stableRevision":"v1","canaryRevision":"v2","stableSide":"C","phase":"Progressing","desired":{"weight":10,"stableCapacity":100,"canaryCapacity":20}}`,
		`{"stableRevision":"v1","canaryRevision":"v2","phase":"Progressing","stepIndex":-1,"unhealthyCount":-3,"desired":{"weight":-10,"stableCapacity":-1,"canaryCapacity":-5}}`,
	} {
		add(raw, fresh)
	}
	add(`{"stableRevision":"v1","canaryRevision":"v2","phase":"Completing","desired":{"weight":30,"stableCapacity":70,"canaryCapacity":40}}`,
		world{flags: 1, weightB: 30, weightA: 70, aReplicas: 10, aPct: 70, bReplicas: 10, bPct: 40})
	// Valid states through every phase of each strategy, in a world that
	// holds what they ask for.
	commands := []rollout.Command{
		nil,
		func(s strategy.State, now time.Time) strategy.State { return s.Abort("fuzz", now) },
		func(s strategy.State, now time.Time) strategy.State { return s.Retarget("v3", now) },
		func(s strategy.State, now time.Time) strategy.State { return s.Retarget("v1", now) },
	}
	for i, strat := range fuzzStrategies {
		for c, cmd := range commands {
			var last strategy.Phase
			for n := 1; n <= 40; n++ {
				s := fuzzWalk(strat, n, n-1-n%3, cmd) // a command one to three steps back
				if n%3 != c%3 && s.Phase == last {
					continue // every third state, and the first of each phase
				}
				last = s.Phase
				b, err := json.Marshal(s)
				if err != nil {
					f.Fatal(err)
				}
				d := s.Desired
				w := world{strat: uint8(i), flags: 1, weightB: uint8(d.Weight), weightA: 255,
					aReplicas: 10, aPct: uint8(d.StableCapacity), bReplicas: 10, bPct: uint8(d.CanaryCapacity)}
				if s.StableSide == strategy.SideB {
					w.weightB, w.aPct, w.bPct = uint8(100-d.Weight), w.bPct, w.aPct
				}
				add(string(b), w)
				if s.Phase.Terminal() {
					break
				}
			}
		}
	}
	mid := fuzzWalk(fuzzStrategies[0], 6, 0, nil)
	mid.StableSide = strategy.SideB
	b, err := json.Marshal(mid)
	if err != nil {
		f.Fatal(err)
	}
	add(string(b), world{flags: 1, weightB: 70, weightA: 255, aReplicas: 10, aPct: 40, bReplicas: 10, bPct: 80})
	add(string(b), world{strat: 1, flags: 2 | fuzzUnhealthy, weightB: 70, weightA: 255, aReplicas: 3, aPct: 40, bReplicas: 3, bPct: 80})
	add(`{"stableRevision":"v1","canaryRevision":"v2","phase":"Aborting","desired":{"weight":60,"stableCapacity":40,"canaryCapacity":60},"aborted":{"reason":"Unhealthy","emergency":true}}`,
		world{flags: 1, weightB: 60, weightA: 40, aReplicas: 3, aPct: 40, bReplicas: 3, bPct: 60})

	f.Fuzz(reconcileOnce)
}

// reconcileOnce is one input of FuzzAnnotationStoreReconcile.
func reconcileOnce(t *testing.T, raw string, stratIdx, flags, weightB, weightA, aReplicas, aPct, bReplicas, bPct uint8) {
	ctx := context.Background()
	strat := fuzzStrategies[int(stratIdx)%len(fuzzStrategies)]
	opts := strat.Shared()
	managed := opts.Capacity == strategy.CapacityManaged
	wb := int32(weightB % 101)
	wa := 100 - wb
	if weightA <= 100 {
		wa = int32(weightA)
	}
	ref := gateway.RouteRef{Namespace: "shop", Name: "web"}
	c := fakeclient.NewClientBuilder().WithScheme(fuzzScheme).
		WithTypeConverters(managedfields.NewDeducedTypeConverter()).
		WithObjects(fuzzRoute(raw, wa, wb, flags&fuzzStatusMask)).
		WithStatusSubresource(&gwv1.HTTPRoute{}).Build()

	s, err := gateway.NewAnnotationStore(c, ref).Load(ctx)
	if err != nil {
		if !rollout.IsPermanent(err) || errors.Is(err, rollout.ErrNotFound) || !strings.Contains(err.Error(), gateway.StateAnnotation) {
			t.Fatalf("Load: %v (%T): want a Permanent error naming the annotation", err, err)
		}
		return
	}

	router, err := gateway.NewRouter(c, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	r := &rollout.Runner{Strategy: strat, Router: router, Clock: fake.NewClock(t0)}
	var a, b *fake.Capacity
	if managed {
		a = fake.NewCapacity(nil, fake.CapacityOptions{Replicas: int32(aReplicas % 11), Percent: int32(aPct % 101)})
		b = fake.NewCapacity(nil, fake.CapacityOptions{Replicas: int32(bReplicas % 11), Percent: int32(bPct % 101)})
		if flags&fuzzUnhealthy != 0 {
			a.SetHealth(strategy.HealthUnhealthy, "fuzz")
			b.SetHealth(strategy.HealthUnhealthy, "fuzz")
		}
		r.A, r.B = a, b
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	routeBefore := getRoute(t, c)
	capsBefore := capacities(a, b)

	next, _, rerr := r.Reconcile(ctx, s)

	routeAfter := getRoute(t, c)
	capsAfter := capacities(a, b)
	wBefore, wAfter := weightsIn(routeBefore), weightsIn(routeAfter)
	capWrites := 0
	if managed {
		capWrites = a.Writes() + b.Writes()
	}
	wrote := router.Counts().Writes > 0 || capWrites > 0 || wBefore != wAfter || capsBefore != capsAfter
	if !maps.Equal(routeBefore.Annotations, routeAfter.Annotations) {
		t.Errorf("annotations changed: %v -> %v", routeBefore.Annotations, routeAfter.Annotations)
	}
	report := func() {
		t.Logf("strategy %d %+v\nloaded %+v\nroute %+v -> %+v, capacity (A, B) %+v -> %+v\nreconcile: %v\nnext: %s %s %+v",
			int(stratIdx)%len(fuzzStrategies), strat, s, wBefore, wAfter, capsBefore, capsAfter, rerr, next.Phase, next.Message, next.Desired)
	}

	if s.Idle() {
		if router.Counts() != (gateway.Counts{}) || managed && a.Reads()+b.Reads() > 0 || wrote {
			report()
			t.Fatalf("an idle state used an adapter: router %+v", router.Counts())
		}
		return
	}
	if verr := s.Validate(opts.Capacity); verr != nil {
		if wrote {
			report()
			t.Fatalf("an invalid state (%v) was applied", verr)
		}
		var se *strategy.StateError
		if !errors.As(rerr, &se) {
			report()
			t.Fatalf("an invalid state (%v): Reconcile returned %v, want a *strategy.StateError", verr, rerr)
		}
		return
	}

	// Every hop is safe. Roles are the loaded state's: a hop of this
	// reconcile is applied with them, even if next swaps them.
	stableSide := s.StableSide
	if stableSide == "" {
		stableSide = strategy.SideA
	}
	sides := [2]struct {
		role  string
		side  strategy.Side
		ready int32 // observed before the reconcile
	}{{"stable", stableSide, 100}, {"canary", stableSide.Other(), 100}}
	for i := range sides {
		if managed {
			sides[i].ready = capsBefore[sideIndex(sides[i].side)].Ready
		}
	}
	emergency := next.Phase == strategy.PhaseAborting && next.Aborted != nil && next.Aborted.Emergency
	if wBefore != wAfter {
		if wAfter.A < 0 || wAfter.B < 0 || wAfter.A+wAfter.B != 100 {
			report()
			t.Fatalf("weights written: %+v, not a split of 100", wAfter)
		}
		for _, sd := range sides {
			w := wAfter.Of(sd.side)
			if rose(wBefore, wAfter, sd.side) && w > sd.ready && !(sd.role == "stable" && emergency) {
				report()
				t.Fatalf("the %s side (%s) now gets %d%% of the traffic, up from weights %+v, with %d%% ready", sd.role, sd.side, w, wBefore, sd.ready)
			}
		}
	}
	if managed {
		for _, sd := range sides {
			i := sideIndex(sd.side)
			before, after := capsBefore[i].Capacity, capsAfter[i].Capacity
			if after < before && carries(wAfter, sd.side, after) {
				report()
				t.Fatalf("the %s side (%s) was scaled down from %d%% to %d%%, below its traffic (weights %+v)", sd.role, sd.side, before, after, wAfter)
			}
		}
	}
}

func sideIndex(s strategy.Side) int {
	if s == strategy.SideB {
		return 1
	}
	return 0
}

// rose reports whether side's share of the traffic is larger under after
// than under before. Weights are shares of their sum, as the data plane
// reads them; weights summing to 0 send nothing anywhere.
func rose(before, after rollout.Weights, side strategy.Side) bool {
	sb, sa := int64(before.A+before.B), int64(after.A+after.B)
	if sa <= 0 {
		return false
	}
	if sb <= 0 {
		return after.Of(side) > 0
	}
	return int64(after.Of(side))*sb > int64(before.Of(side))*sa
}

// carries reports whether side's share of the traffic under w exceeds
// capacity percent.
func carries(w rollout.Weights, side strategy.Side, capacity int32) bool {
	sum := int64(w.A + w.B)
	return sum > 0 && int64(w.Of(side))*100 > int64(capacity)*sum
}

func getRoute(t *testing.T, c client.Client) *gwv1.HTTPRoute {
	t.Helper()
	var rt gwv1.HTTPRoute
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "shop", Name: "web"}, &rt); err != nil {
		t.Fatal(err)
	}
	return &rt
}

// capacities returns the status of sides A and B (zero in the fixed mode).
func capacities(a, b *fake.Capacity) [2]rollout.CapacityStatus {
	if a == nil {
		return [2]rollout.CapacityStatus{}
	}
	return [2]rollout.CapacityStatus{a.Status(), b.Status()}
}
