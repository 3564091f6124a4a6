package strategy

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// applyAll makes the observation of s show everything desired applied and
// ready: the route (weight and extras, accepted) and each side settled at
// its capacity, running its revision.
func applyAll(s *State, mode CapacityMode) {
	o := &s.Observed
	o.Weight, o.WeightApplied, o.WeightInvalid = s.Desired.Weight, true, false
	o.Extras = *s.DesiredExtras.DeepCopy()
	o.Stable = SideObservation{Capacity: s.Desired.StableCapacity, Ready: s.Desired.StableCapacity, Settled: true}
	o.Canary = SideObservation{Capacity: s.Desired.CanaryCapacity, Ready: s.Desired.CanaryCapacity, Settled: true}
	if mode == CapacityFixed {
		o.Stable = SideObservation{Capacity: 100, Ready: 100, Settled: true}
		o.Canary = SideObservation{Capacity: 100, Ready: 100, Settled: true}
	}
}

// hops lists what a decision asks for, for the tables below.
func hops(d *Decision) string {
	var out []string
	if d.CanaryCapacity.Set {
		out = append(out, "canary "+itoa(d.CanaryCapacity.Value))
	}
	if d.StableCapacity.Set {
		out = append(out, "stable "+itoa(d.StableCapacity.Value))
	}
	if d.Weight.Set {
		out = append(out, "weight "+itoa(d.Weight.Value))
	}
	if d.Extras {
		out = append(out, d.State.DesiredExtras.String())
	}
	if len(out) == 0 {
		return "none: " + d.State.Message
	}
	return strings.Join(out, "; ")
}

// run steps strat from s, applying every hop at once, one second apart, and
// returns the hops asked, until the phase is terminal or n steps are made.
func runHops(t *testing.T, strat Strategy, s State, mode CapacityMode, n int, at time.Time) ([]string, State) {
	t.Helper()
	var got []string
	for i := 0; i < n && !s.Phase.Terminal(); i++ {
		d := checkStep(t, strat, s, at)
		if d.HasHops() {
			got = append(got, hops(&d))
		}
		s = d.State
		applyAll(&s, mode)
		at = at.Add(time.Second)
	}
	return got, s
}

func beta(expected int32) CanaryStep {
	return SetHeaderRoute(expected, HeaderMatch{Name: "x-beta", Value: "1"})
}

// TestExtrasHops: the hops of rollouts with header routes, mirrors and
// sticky sessions, from the start to the end, with adapters that apply
// everything at once.
func TestExtrasHops(t *testing.T) {
	for _, tc := range []struct {
		name  string
		strat Strategy
		want  []string
	}{{
		// The header route's 20% is load on the canary: at weight 10 the
		// canary is first provisioned for 20 + 80·10/100 = 28.
		name:  "header route provisions its load first",
		strat: Canary{MaxSurgePercent: 40, Steps: []CanaryStep{SetWeight(10), beta(20), SetWeight(30), SetHeaderRoute(0)}},
		want: []string{
			"canary 10", "weight 10",
			"canary 28", "header route x-beta=1 (at most 20%)",
			// 30 is 20 + 80·30/100 = 44 on the canary: the surge budget
			// gives 40 first, so the weight goes to 25 on the way.
			"canary 40", "weight 25", "stable 75", "canary 44", "weight 30",
			"no extras",
			"weight 44", "canary 65", "weight 65", "stable 35", "canary 100", "weight 100", "canary 100; stable 0",
		},
	}, {
		// Unknown share: counted as all requests, so the canary must carry
		// the whole route before the header route is applied.
		name:  "unknown share counts every request",
		strat: Canary{MaxSurgePercent: 100, Steps: []CanaryStep{SetWeight(10), beta(-1), SetWeight(30)}},
		want: []string{
			"canary 10", "weight 10",
			"canary 100", "header route x-beta=1 (share unknown, counted as 100%)",
			"weight 30", "weight 100", "no extras", "canary 100; stable 0",
		},
	}, {
		// A mirror of 50% of the stable side's requests at weight 20 is
		// 20 + 40 = 60 on the canary.
		name:  "mirror is load on the canary",
		strat: Canary{MaxSurgePercent: 50, Steps: []CanaryStep{SetWeight(20), SetMirror(50), SetWeight(40), SetMirror(0)}},
		want: []string{
			"canary 20", "weight 20",
			// 60 on the canary: 50 within the surge budget, then the stable
			// side down to its traffic frees the rest.
			"canary 50", "stable 80", "canary 60", "mirror 50%",
			"canary 70", "weight 40",
			"no extras",
			"weight 70", "stable 30", "canary 100", "weight 100", "canary 100; stable 0",
		},
	}, {
		// Fixed capacity: sticky sessions are programmed before the first
		// weight hop and travel with every one; the weight stops on ticket
		// values only.
		name: "sticky sessions, fixed capacity",
		strat: Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: time.Second}, Options: Options{Capacity: CapacityFixed,
			SessionAffinity: &SessionAffinity{CookieName: "s"}}},
		want: []string{
			"sticky sessions", "weight 25", "weight 50", "weight 75", "weight 100", "no extras",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			mode := tc.strat.Shared().Capacity
			s := NewState("v1", "v2")
			applyAll(&s, mode)
			got, end := runHops(t, tc.strat, s, mode, 200, t0)
			if end.Phase != PhaseSucceeded {
				t.Fatalf("ended %s: %s", end.Phase, end.Message)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hops (-want +got):\n%s\n%#v", diff, got)
			}
		})
	}
}

// TestExtrasAbort: an abort drops the header route and the mirror in a hop
// of its own before the weight walks back, the sticky tickets go once the
// weight is 0, and an emergency abort drops them with the weight in one
// update.
func TestExtrasAbort(t *testing.T) {
	strat := Canary{MaxSurgePercent: 100, Steps: []CanaryStep{SetWeight(20), beta(10), SetMirror(30), SetWeight(50), PauseUntilResumed()},
		Options: Options{SessionAffinity: &SessionAffinity{}, AbortRamp: AbortGradual}}
	s := NewState("v1", "v2")
	applyAll(&s, CapacityManaged)
	_, s = runHops(t, strat, s, CapacityManaged, 40, t0)
	if s.Phase != PhasePaused || s.Desired.Weight != 50 || s.DesiredExtras.MirrorPercent != 30 || s.DesiredExtras.Sticky == nil {
		t.Fatalf("not paused at 50 with every extra: %s %+v %s", s.Phase, s.Desired, s.DesiredExtras)
	}
	run := s.DesiredExtras.Sticky.Run
	at := t0.Add(time.Minute)
	aborted := s.Abort("", at)
	got, end := runHops(t, strat, aborted, CapacityManaged, 40, at)
	// The stable side was shrunk to its traffic at 50: each step of the
	// walk back grows it first.
	want := []string{"sticky sessions", "stable 80", "weight 20", "stable 100", "weight 0", "canary 0", "no extras"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("gradual abort hops (-want +got):\n%s", diff)
	}
	if end.Phase != PhaseAborted || !end.DesiredExtras.IsZero() {
		t.Fatalf("ended %s with %s", end.Phase, end.DesiredExtras)
	}

	emergency := strat
	emergency.AbortRamp = AbortEmergency
	d := checkStep(t, emergency, s.Abort("", at), at)
	if got := hops(&d); got != "stable 100; weight 0; sticky sessions" {
		t.Errorf("emergency abort asks %q, want the weight 0 and the header route and mirror dropped in one update, the stable side grown", got)
	}
	if d.State.DesiredExtras.Sticky == nil || d.State.DesiredExtras.Sticky.Run != run {
		t.Errorf("emergency abort changed the tickets: %+v", d.State.DesiredExtras.Sticky)
	}
}

// TestExtrasRepair: extras another writer removed (the route re-applied
// without them) are asked for again once the poll interval has passed, and
// only while they fit the canary's ready capacity.
func TestExtrasRepair(t *testing.T) {
	strat := Canary{Options: Options{Capacity: CapacityFixed}, Steps: []CanaryStep{SetWeight(10), beta(20), PauseUntilResumed()}}
	s := NewState("v1", "v2")
	applyAll(&s, CapacityFixed)
	_, s = runHops(t, strat, s, CapacityFixed, 20, t0)
	if s.DesiredExtras.HeaderRoute == nil || s.Phase != PhasePaused {
		t.Fatalf("no header route: %s %s", s.Phase, s.DesiredExtras)
	}
	s.Observed.Extras = TrafficExtras{} // dropped by another writer
	at := t0.Add(time.Hour)
	if d := checkStep(t, strat, s, at); !d.Extras || d.State.Phase != PhasePaused {
		t.Errorf("dropped extras not asked again: %s (%s)", hops(&d), d.State.Phase)
	}
	s.Observed.Canary.Ready = 20 // 20 + 80·10/100 = 28 no longer fits
	if d := checkStep(t, strat, s, at); d.Extras {
		t.Errorf("extras asked again onto a canary that cannot carry them: %s", hops(&d))
	}
}

// TestExtrasValidation: every problem of extras is reported at once, with
// its field path.
func TestExtrasValidation(t *testing.T) {
	bad := Canary{MaxSurgePercent: 10, Steps: []CanaryStep{
		SetHeaderRoute(5, HeaderMatch{Name: "bad name", Value: "1"}, HeaderMatch{Type: HeaderRegularExpression, Name: "x-re", Value: "("},
			HeaderMatch{Type: "Prefix", Name: "x-p", Value: "1"}, HeaderMatch{Type: HeaderCookie, Name: "c", Value: "a;b"}),
		SetMirror(101),
		{SetMirror: &MirrorStep{Percent: 5}, SetWeight: ptr(int32(5))},
	}, Options: Options{SessionAffinity: &SessionAffinity{SameSite: "None", Path: "app", MaxAge: &metav1.Duration{Duration: time.Millisecond}}}}
	err := bad.Validate()
	if err == nil {
		t.Fatal("valid")
	}
	for _, path := range []string{
		"canary.steps[0].setHeaderRoute.matches[0].name",
		"canary.steps[0].setHeaderRoute.matches[1].value",
		"canary.steps[0].setHeaderRoute.matches[2].type",
		"canary.steps[0].setHeaderRoute.matches[3].value",
		"canary.steps[1].setMirror.percent",
		"canary.steps[2]: Invalid value: 2: exactly one of",
		"canary.sessionAffinity.sameSite",
		"canary.sessionAffinity.path",
		"canary.sessionAffinity.maxAge",
	} {
		if !strings.Contains(err.Error(), path) {
			t.Errorf("no %s in %v", path, err)
		}
	}
	for _, tc := range []struct {
		strat Strategy
		path  string
	}{
		{Canary{MaxSurgePercent: 10, Steps: []CanaryStep{SetWeight(10), beta(50)}}, "canary.steps[1]: Invalid value: \"header route x-beta=1 (at most 50%)\": puts a load of 55"},
		{Canary{MaxSurgePercent: 20, Steps: []CanaryStep{beta(20)}}, "canary.steps[0]: Invalid value: \"header route x-beta=1 (at most 20%)\": leaves the weight no room to rise from 0"},
		{Canary{Options: Options{Capacity: CapacityReplicas}, MaxSurgePercent: 10, Steps: []CanaryStep{SetMirror(10)}}, "canary.steps[0]: Invalid value: \"set\": needs a traffic router"},
		{Incremental{StepPercent: 5, MaxSurgePercent: 5, Interval: metav1.Duration{Duration: time.Second}, Options: Options{SessionAffinity: &SessionAffinity{}}}, "incremental.stepPercent: Invalid value: 5: sessionAffinity allows at most 16 weights"},
		{Canary{MaxSurgePercent: 5, Options: Options{SessionAffinity: &SessionAffinity{}}}, "canary.sessionAffinity: Invalid value: 20: allows at most 16 ticket values"},
		{BlueGreen{Options: Options{Capacity: CapacityReplicas, SessionAffinity: &SessionAffinity{}}}, "blueGreen.sessionAffinity"},
	} {
		if err := tc.strat.Validate(); err == nil || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%T: got %v, want %s", tc.strat, err, tc.path)
		}
	}
	good := Canary{MaxSurgePercent: 40, Steps: []CanaryStep{SetWeight(10), beta(20), SetWeight(30)},
		Options: Options{SessionAffinity: &SessionAffinity{CookieName: "s", SameSite: "None", Secure: true}}}
	if err := good.Validate(); err != nil {
		t.Errorf("valid strategy refused: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }
