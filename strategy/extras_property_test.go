package strategy

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// genStrategyExtras draws a strategy as genStrategy does and, outside the
// Replicas mode, adds traffic extras: header route and mirror steps at
// random places of a Canary's steps, and session affinity.
func genStrategyExtras(t *rapid.T, mode CapacityMode) Strategy {
	strat := genStrategy(t, mode)
	if mode == CapacityReplicas {
		return strat
	}
	sticky := rapid.Bool().Draw(t, "sticky")
	var aff *SessionAffinity
	if sticky {
		aff = &SessionAffinity{}
	}
	switch v := strat.(type) {
	case Incremental:
		if sticky && v.StepPercent < 7 {
			if mode == CapacityManaged && v.MaxSurgePercent < 7 {
				return v // no sticky grid fits within this surge budget
			}
			v.StepPercent = 7
		}
		v.SessionAffinity = aff
		return v
	case BlueGreen:
		v.SessionAffinity = aff
		return v
	case Canary:
		v.SessionAffinity = aff
		steps := append([]CanaryStep(nil), v.Steps...)
		for n := rapid.IntRange(0, 3).Draw(t, "extras"); n > 0; n-- {
			var st CanaryStep
			switch rapid.IntRange(0, 3).Draw(t, "extraKind") {
			case 0:
				st = SetHeaderRoute(rapid.Int32Range(-1, 100).Draw(t, "expected"), HeaderMatch{Name: "x-beta", Value: "1"})
			case 1:
				st = SetHeaderRoute(rapid.Int32Range(-1, 100).Draw(t, "expected"),
					HeaderMatch{Type: HeaderCookie, Name: "beta", Value: "yes"}, HeaderMatch{Name: "x-team", Value: "core"})
			case 2:
				st = SetHeaderRoute(0) // clears it
			default:
				st = SetMirror(rapid.Int32Range(0, 100).Draw(t, "mirror"))
			}
			at := rapid.IntRange(0, len(steps)).Draw(t, "at")
			steps = append(steps[:at], append([]CanaryStep{st}, steps[at:]...)...)
		}
		v.Steps = steps
		if v.Validate() != nil {
			v.SessionAffinity = nil // more ticket values than a router can hand out
		}
		if v.Validate() != nil {
			v.Steps = strat.(Canary).Steps // extras whose load the surge budget cannot carry
		}
		return v
	}
	return strat
}

// checkExtras checks the rules of traffic extras (the package doc's
// invariants 1 and 4 with header-routed and mirrored load counted, and the
// sticky sessions' rules) on a decision Step made from the valid state s.
func checkExtras(strat Strategy) func(t *rapid.T, s State, d *Decision) {
	return func(t *rapid.T, s State, d *Decision) {
		in, out := &s.DesiredExtras, &d.State.DesiredExtras
		w := d.State.Desired.Weight
		walking := s.Phase == PhaseAborting || s.Phase.Terminal() || d.State.Phase == PhaseAborting || d.State.Phase.Terminal()
		// Extras that add load on the canary go only onto observed ready
		// capacity, and only once the previous hop is observed applied.
		if d.Extras && out.CanaryLoad(w) > max(in.CanaryLoad(w), s.Observed.Extras.CanaryLoad(w)) {
			if out.CanaryLoad(w) > s.Observed.Canary.Ready {
				t.Fatalf("extras %s load the canary with %d at weight %d, its observed ready capacity is %d", out, out.CanaryLoad(w), w, s.Observed.Canary.Ready)
			}
			if walking {
				t.Fatalf("a walk back added load: %s -> %s", in, out)
			}
		}
		// After an abort no decision raises the header share or the mirror.
		if walking && d.Extras && (out.headerShare() > in.headerShare() || out.MirrorPercent > in.MirrorPercent) {
			t.Fatalf("phase %s -> %s raised the extras: %s -> %s", s.Phase, d.State.Phase, in, out)
		}
		if d.State.Phase == PhaseAborted && s.Phase != PhaseAborted && (!out.IsZero() || d.State.Desired.Weight != 0) {
			t.Fatalf("aborted with extras %s at weight %d: every session must be back on the stable side", out, d.State.Desired.Weight)
		}
		if d.State.Phase == PhaseSucceeded && s.Phase != PhaseSucceeded && !out.IsZero() {
			t.Fatalf("succeeded with extras %s still asked", out)
		}
		// Sticky sessions: a weight move stops on a ticket value (or 0), and
		// going forward the weight never falls, so no session leaves the
		// canary.
		if k := out.Sticky; k != nil && d.Weight.Set && d.Weight.Value != s.Desired.Weight && !walking && !s.Unobserved {
			v := d.Weight.Value
			onGrid := v == 0
			for _, g := range k.Grid {
				onGrid = onGrid || g == v
			}
			if !onGrid {
				t.Fatalf("sticky sessions: weight %d is not a ticket value %v", v, k.Grid)
			}
			if v < s.Desired.Weight && nonDecreasing(strat) {
				t.Fatalf("sticky sessions: going forward the weight fell from %d to %d", s.Desired.Weight, v)
			}
		}
	}
}

// TestExtrasNeverUnsafe: the safety properties of TestNeverUnsafe with
// header routes, mirrors and sticky sessions, and a world that also drops
// the route's extras: header-routed and mirrored requests are load on the
// canary and never exceed its ready capacity (invariant 1), extras hops
// wait for the previous hop (invariant 4), an abort only ever lowers them,
// and a rollout ends with none left.
func TestExtrasNeverUnsafe(t *testing.T) {
	rounds(t, 2, func(t *rapid.T) {
		var strat Strategy
		unsafeWith(t, func(t *rapid.T, mode CapacityMode) Strategy {
			strat = genStrategyExtras(t, mode)
			return strat
		}, func(t *rapid.T, s State, d *Decision) { checkExtras(strat)(t, s, d) })
	})
}

// TestExtrasTerminateAsPlanned: with adapters that apply what they are
// asked, every strategy with extras finishes, asks for exactly the hops
// Plan predicts, and leaves no extras behind.
func TestExtrasTerminateAsPlanned(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mode := rapid.SampledFrom([]CapacityMode{CapacityManaged, CapacityFixed}).Draw(t, "mode")
		strat := genStrategyExtras(t, mode)
		tl, planned := plannedHops(t, strat)
		for _, e := range tl.Entries {
			if e.CanaryLoad > 100 || e.CanaryLoad < e.Allocation.Weight {
				t.Fatalf("%s: canary load %d at weight %d", e.What, e.CanaryLoad, e.Allocation.Weight)
			}
		}
		s := NewState("stable", "canary")
		w := newWorld(mode, &s)
		hops, end, _ := drive(t, strat, s, w, rapid.IntRange(0, 4).Draw(t, "lag"), t0, 20000)
		if end.Phase != PhaseSucceeded {
			t.Fatalf("ended %s", end.Phase)
		}
		if diff := cmp.Diff(planned, hops); diff != "" {
			t.Fatalf("hops differ from the plan (-plan +run):\n%s", diff)
		}
		if !w.askedExtras.IsZero() || !end.DesiredExtras.IsZero() {
			t.Fatalf("extras left after success: world %s, state %s", w.askedExtras, end.DesiredExtras)
		}
	})
}

// TestCanaryLoadModel: CanaryLoad agrees with counting requests one by one
// (h of every 100 match the header route, w of the rest go to the canary,
// p of what goes to the stable side is copied), never falls as the weight
// grows, and CanaryWeightFor inverts it.
func TestCanaryLoadModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := rapid.Int32Range(0, 100).Draw(t, "h")
		p := rapid.Int32Range(0, 100).Draw(t, "p")
		x := TrafficExtras{MirrorPercent: p}
		if h > 0 || rapid.Bool().Draw(t, "route") {
			x.HeaderRoute = &HeaderRoute{Matches: []HeaderMatch{{Name: "x", Value: "1"}}, ExpectedPercent: &h}
		}
		prev := int32(-1)
		for w := int32(0); w <= 100; w++ {
			// Per 10,000 requests, exactly.
			matched := 100 * x.headerShare()
			rest := 10000 - matched
			toCanary := rest * w / 100
			copies := (rest - toCanary) * p / 100
			exact := matched + toCanary + copies
			got := x.CanaryLoad(w)
			if got*100 < exact || got > 100 {
				t.Fatalf("h %d p %d w %d: load %d below the exact %d/10000", x.headerShare(), p, w, got, exact)
			}
			if got*100 > exact+100 && got < 100 {
				t.Fatalf("h %d p %d w %d: load %d overcounts the exact %d/10000 by more than rounding", x.headerShare(), p, w, got, exact)
			}
			if got < prev {
				t.Fatalf("load fell from %d to %d at weight %d", prev, got, w)
			}
			prev = got
		}
		ready := rapid.Int32Range(0, 100).Draw(t, "ready")
		wf := x.CanaryWeightFor(ready)
		if wf >= 0 && x.CanaryLoad(wf) > ready || wf < 100 && x.CanaryLoad(wf+1) <= ready {
			t.Fatalf("CanaryWeightFor(%d) = %d: load there %d", ready, wf, x.CanaryLoad(max(wf, 0)))
		}
	})
}

// TestStickyGrid: the ticket values are the distinct weights in (0,100)
// and 100, ascending, with a value every gap between them, at most 16;
// snap rounds toward where the weight is.
func TestStickyGrid(t *testing.T) {
	for _, tc := range []struct {
		ws   []int32
		gap  int32
		want []int32
		ok   bool
	}{
		{nil, 0, []int32{100}, true},
		{nil, 30, []int32{30, 60, 90, 100}, true},
		{[]int32{10, 50}, 25, []int32{10, 35, 50, 75, 100}, true},
		{[]int32{10}, 6, nil, false},
		{[]int32{0, 10, 10, 50, 100, 25}, 0, []int32{10, 25, 50, 100}, true},
		{[]int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, 0, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 100}, true},
		{[]int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, 0, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 100}, false},
	} {
		got, ok := stickyGrid(tc.ws, tc.gap)
		if !tc.ok && tc.want == nil {
			got = nil // only ok is checked
		}
		if diff := cmp.Diff(tc.want, got); diff != "" || ok != tc.ok {
			t.Errorf("stickyGrid(%v) ok %v (-want +got):\n%s", tc.ws, ok, diff)
		}
	}
	grid := []int32{10, 25, 50, 100}
	for _, tc := range []struct {
		w    int32
		up   bool
		want int32
	}{{30, true, 25}, {9, true, 0}, {30, false, 50}, {50, true, 50}, {0, false, 0}, {100, true, 100}, {99, false, 100}} {
		if got := maskOf(grid).snap(tc.w, tc.up); got != tc.want {
			t.Errorf("onGrid(%d, up %v) = %d, want %d", tc.w, tc.up, got, tc.want)
		}
	}
}

// TestStickyRunsDiffer: two rollouts of one revision started at different
// instants hand out tickets of different runs.
func TestStickyRunsDiffer(t *testing.T) {
	a, b := runID("v2", micro(t0)), runID("v2", micro(t0.Add(time.Microsecond)))
	if a == b || len(a) != 8 || runID("v2", micro(t0)) != a {
		t.Fatalf("run ids %q %q", a, b)
	}
}
