// Package render draws the screen of `kubectl upshift get`: where a rollout
// stands, for a person. Render is pure: everything it shows comes from the
// View, the current instant included, so the same View always draws the
// same text.
//
// PlanSVG (and PlanChart) plot the dry run of `kubectl upshift plan --svg`:
// a strategy.Timeline as a self-contained SVG, the same bytes for the same
// timeline.
package render

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/upshift-dev/upshift/strategy"
)

// ErrNoNow is returned by Render for a View without Now.
var ErrNoNow = errors.New("render: View.Now is zero")

// DefaultMaxEvents is the number of Events shown when View.MaxEvents is 0.
const DefaultMaxEvents = 8

// View is what Render draws. The zero value is not drawable (Now must be
// set); a View is a plain value, safe for concurrent reads.
type View struct {
	// Kind, Namespace and Name name the object that holds the rollout
	// (Namespace may be empty).
	Kind, Namespace, Name string
	// State is the rollout's state as stored.
	State strategy.State
	// Strategy is the rollout's strategy; nil when it is not known (a
	// rollout whose state lives in a route annotation). Without it the
	// current step and the remaining time are not shown.
	Strategy strategy.Strategy
	// Control is the spec's control, when the object has one: a paused
	// spec is shown.
	Control *strategy.Control
	// Events are recent Events about the object, in any order.
	Events []RecentEvent
	// Now is the instant the screen is drawn at: ages and remaining times
	// count from it.
	Now time.Time
	// MaxEvents bounds the Events shown, the newest kept; 0 means
	// DefaultMaxEvents, a negative value shows none.
	MaxEvents int
}

// RecentEvent is one Kubernetes RecentEvent about the rollout's object.
type RecentEvent struct {
	// Time is when it last happened.
	Time time.Time
	// Type is Normal or Warning.
	Type    string
	Reason  string
	Message string
	// Count is how many times it happened; 0 or 1 are shown as once.
	Count int32
}

// Render draws v on w.
func Render(w io.Writer, v View) error {
	if v.Now.IsZero() {
		return ErrNoNow
	}
	var b strings.Builder
	s := &v.State
	title := v.Name
	if v.Namespace != "" {
		title = v.Namespace + "/" + v.Name
	}
	if v.Kind != "" {
		title = v.Kind + " " + title
	}
	fmt.Fprintf(&b, "%s\n", title)
	kv := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(kv, "Phase:\t%s\n", phase(s))
	fmt.Fprintf(kv, "Revisions:\t%s\n", revisions(s))
	if v.Strategy != nil {
		fmt.Fprintf(kv, "Strategy:\t%s\n", describeStrategy(v.Strategy))
	}
	if step := currentStep(&v); step != "" {
		fmt.Fprintf(kv, "Step:\t%s\n", step)
	}
	fmt.Fprintf(kv, "Waiting for:\t%s\n", waitsFor(&v))
	if c := v.Control; c != nil && c.Suspended {
		fmt.Fprintf(kv, "Control:\tspec.control.suspended is true (resume clears it)\n")
	}
	if c := v.Control; c != nil && c.Paused {
		fmt.Fprintf(kv, "Control:\tspec.control.paused is true (resume clears it)\n")
	}
	if s.Message != "" && s.Message != string(s.Phase) {
		fmt.Fprintf(kv, "Message:\t%s\n", s.Message)
	}
	if s.Aborted != nil {
		a := fmt.Sprintf("%s, %s", s.Aborted.Reason, ago(s.Aborted.At.Time, v.Now))
		if s.Aborted.Emergency {
			a += " (emergency: all traffic moved back at once)"
		}
		label := "Aborted"
		if suspended(s) {
			label = "Suspended"
		}
		fmt.Fprintf(kv, "%s:\t%s\n", label, a)
	}
	if r := remaining(&v); r != "" {
		fmt.Fprintf(kv, "Remaining:\t%s\n", r)
	}
	if err := kv.Flush(); err != nil {
		return err
	}

	b.WriteString("\n")
	sides(&b, s)

	if len(s.Conditions) > 0 {
		b.WriteString("\nConditions:\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  TYPE\tSTATUS\tREASON\tSINCE\tMESSAGE\n")
		for _, c := range s.Conditions {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, ago(c.LastTransitionTime.Time, v.Now), oneLine(c.Message))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	if evs := recent(v.Events, v.MaxEvents); len(evs) > 0 {
		b.WriteString("\nEvents:\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  AGE\tTYPE\tREASON\tMESSAGE\n")
		for _, e := range evs {
			age := ago(e.Time, v.Now)
			if e.Count > 1 {
				age += fmt.Sprintf(" (x%d)", e.Count)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", age, e.Type, e.Reason, oneLine(e.Message))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// phase names the phase, also while idle.
func phase(s *strategy.State) string {
	switch {
	case s.Unobserved:
		return "Adopting (not observed yet)"
	case s.Idle():
		return "Idle"
	case s.AwaitingResume && s.Phase != strategy.PhasePaused:
		return string(s.Phase) + " (paused)"
	case s.Phase == strategy.PhaseAborting && suspended(s):
		return string(s.Phase) + " (suspending)"
	}
	return string(s.Phase)
}

// suspended reports a suspension: its walk back (phase Aborting) or phase
// Suspended.
func suspended(s *strategy.State) bool {
	if s.Phase == strategy.PhaseSuspended {
		return true
	}
	a := s.Aborted
	return s.Phase == strategy.PhaseAborting && a != nil &&
		(a.Reason == strategy.ReasonSuspended || a.Reason == strategy.ReasonControlSuspend)
}

func revisions(s *strategy.State) string {
	switch {
	case s.Idle() || s.Unobserved:
		return "stable " + orDash(s.StableRevision)
	case s.Phase == strategy.PhaseSucceeded:
		return fmt.Sprintf("stable %s (rolled out)", orDash(s.StableRevision))
	}
	out := fmt.Sprintf("stable %s -> canary %s", orDash(s.StableRevision), orDash(s.CanaryRevision))
	if s.PendingRevision != "" {
		out += ", then " + s.PendingRevision
	}
	return out
}

// sides draws the table of the two physical sides.
func sides(b *strings.Builder, s *strategy.State) {
	stableSide := s.StableSide
	if stableSide == "" {
		stableSide = strategy.SideA
	}
	o := &s.Observed
	idle := s.Idle() || s.Unobserved
	// Nothing observed at all (the zero state): show no numbers.
	unknown := o.At.IsZero() && o.Stable == (strategy.SideObservation{}) && o.Canary == (strategy.SideObservation{}) && !o.WeightApplied
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "SIDE\tROLE\tREVISION\tWEIGHT\tCAPACITY\tREADY\tSETTLED\n")
	for _, side := range []strategy.Side{strategy.SideA, strategy.SideB} {
		stable := side == stableSide
		var (
			role, rev                   string
			obs                         strategy.SideObservation
			weight, wantWeight, wantCap int32
		)
		if stable {
			role, rev, obs = "stable", s.StableRevision, o.Stable
			weight, wantWeight, wantCap = 100-o.Weight, 100-s.Desired.Weight, s.Desired.StableCapacity
		} else {
			role, rev, obs = "canary", s.CanaryRevision, o.Canary
			weight, wantWeight, wantCap = o.Weight, s.Desired.Weight, s.Desired.CanaryCapacity
			if idle || s.Phase == strategy.PhaseSucceeded {
				role, rev = "idle", "-" // its revision is no longer the rollout's
			}
		}
		if o.Revisions && obs.Revision != "" && obs.Revision != rev && rev != "-" {
			rev += " (runs " + obs.Revision + ")"
		} else if o.Revisions && rev == "-" && obs.Revision != "" {
			rev = obs.Revision
		}
		w := fmt.Sprint(weight)
		if !idle && wantWeight != weight {
			w += fmt.Sprintf(" -> %d", wantWeight)
		}
		if !o.WeightApplied && !idle {
			w += " (not applied)"
		}
		c := fmt.Sprint(obs.Capacity)
		if !idle && wantCap != obs.Capacity {
			c += fmt.Sprintf(" -> %d", wantCap)
		}
		ready, settled := fmt.Sprint(obs.Ready), yesNo(obs.Settled)
		if unknown {
			w, c, ready, settled = "-", "-", "-", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", side, role, orDash(rev), w, c, ready, settled)
	}
	_ = tw.Flush()
}

// describeStrategy sums up a strategy on one line.
func describeStrategy(st strategy.Strategy) string {
	var out string
	switch x := st.(type) {
	case strategy.Incremental:
		out = fmt.Sprintf("incremental, +%d%% every %s", x.StepPercent, x.Interval.Duration)
	case strategy.Canary:
		out = fmt.Sprintf("canary, %d steps", len(x.Steps))
	case strategy.BlueGreen:
		out = "blue-green"
	default:
		out = fmt.Sprintf("%T", st)
	}
	if m := st.Shared().Capacity; m != "" {
		out += fmt.Sprintf(", %s capacity", m)
	}
	return out
}

// currentStep describes the step the rollout is at, for a Canary.
func currentStep(v *View) string {
	c, ok := v.Strategy.(strategy.Canary)
	s := &v.State
	// A suspended rollout enters the step it stood at again on resume.
	again := s.Phase == strategy.PhaseSuspended && !s.StartedAt.IsZero()
	if !ok || s.Idle() || s.Unobserved || s.Phase.Terminal() && !again || s.Phase == strategy.PhaseAborting {
		return ""
	}
	n := len(c.Steps)
	i := int(s.StepIndex)
	var out string
	if i >= n {
		out = fmt.Sprintf("%d/%d: promote to 100", n+1, n+1)
	} else {
		out = fmt.Sprintf("%d/%d: %s", i+1, n+1, describeStep(c.Steps[i]))
	}
	if again {
		out += " (entered again on resume)"
	}
	return out
}

func describeStep(st strategy.CanaryStep) string {
	switch {
	case st.SetWeight != nil:
		return fmt.Sprintf("set weight %d", *st.SetWeight)
	case st.Pause != nil && st.Pause.Duration != nil:
		return "pause " + st.Pause.Duration.Duration.String()
	case st.Pause != nil:
		return "pause until resumed"
	case st.Gate != nil:
		return "gate " + st.Gate.Name
	}
	return "(empty step)"
}

// waitsFor says what the rollout waits for now.
func waitsFor(v *View) string {
	s := &v.State
	switch {
	case s.Unobserved:
		return "the first observation of the route and the sides"
	case s.Idle():
		return "nothing: no rollout (a new revision starts one)"
	case s.Phase == strategy.PhaseSuspended && s.StartedAt.IsZero():
		return "resume: suspended before its first step (resume starts it)"
	case s.Phase == strategy.PhaseSuspended:
		what := fmt.Sprintf("resume: suspended (resume continues from weight %d)", s.ResumeWeight)
		if !s.FinishedAt.IsZero() {
			what += ", walked back " + ago(s.FinishedAt.Time, v.Now)
		}
		return what
	case s.Phase.Terminal():
		what := "nothing: " + string(s.Phase)
		if !s.FinishedAt.IsZero() {
			what += " " + ago(s.FinishedAt.Time, v.Now)
		}
		if s.Phase == strategy.PhaseAborted {
			what += " (retry starts it again)"
		}
		return what
	case s.Observed.Error != "":
		return "the adapters to answer: " + oneLine(s.Observed.Error)
	case s.AwaitingResume:
		since := ""
		if !s.PausedAt.IsZero() {
			since = ", paused " + ago(s.PausedAt.Time, v.Now)
		}
		switch s.PauseReason {
		case strategy.ReasonControlPause:
			return "resume: spec.control.paused holds it" + since
		case strategy.ReasonManualPause:
			return "resume: paused by a command" + since
		case strategy.ReasonPauseStep:
			return "promote or resume: a pause step without end" + since
		case strategy.ReasonGateInconclusive:
			return fmt.Sprintf("promote or resume: gate %s was inconclusive%s", orDash(s.Gate), since)
		case strategy.ReasonUnhealthy:
			return "resume: paused because the canary was unhealthy" + since
		}
		return "resume: paused (" + s.PauseReason + ")" + since
	case s.Gate != "":
		g := s.Observed.Gate(s.Gate)
		out := "a verdict of gate " + s.Gate
		if g.Verdict != strategy.VerdictPending {
			out += fmt.Sprintf(" (last: %s)", g.Verdict)
		}
		return out
	}
	if until, ok := pauseEnd(v); ok {
		if until.After(v.Now) {
			return fmt.Sprintf("a timed pause until %s (%s left)", clockTime(until), human(until.Sub(v.Now)))
		}
		return fmt.Sprintf("a timed pause that ended at %s: the next reconcile moves on", clockTime(until))
	}
	if p := inFlight(s); p != "" {
		return p
	}
	if s.Phase == strategy.PhaseAborting && suspended(s) {
		return "the next hop of the suspension's walk back to the stable side"
	}
	if s.Phase == strategy.PhaseAborting {
		return "the next hop of the walk back to the stable side"
	}
	if in, ok := v.Strategy.(strategy.Incremental); ok && s.Phase == strategy.PhaseProgressing && !s.WeightChangedAt.IsZero() {
		next := s.NextWeightHopAt(in.Interval.Duration)
		if next.After(v.Now) {
			return fmt.Sprintf("the step interval: next weight hop at %s (%s left)", clockTime(next), human(next.Sub(v.Now)))
		}
	}
	if s.Message != "" && s.Message != string(s.Phase) {
		return s.Message
	}
	return "the next reconcile"
}

// inFlight describes the hops asked for and not observed applied yet, and
// the sides still moving; "" when the world shows what was asked.
func inFlight(s *strategy.State) string {
	o, d := &s.Observed, &s.Desired
	var parts []string
	if o.Weight != d.Weight || !o.WeightApplied {
		parts = append(parts, fmt.Sprintf("canary weight %d applied (route shows %d)", d.Weight, o.Weight))
	}
	for _, x := range []struct {
		role string
		want int32
		obs  strategy.SideObservation
	}{{"stable", d.StableCapacity, o.Stable}, {"canary", d.CanaryCapacity, o.Canary}} {
		switch {
		case x.obs.Capacity != x.want:
			parts = append(parts, fmt.Sprintf("%s capacity %d (side shows %d)", x.role, x.want, x.obs.Capacity))
		case !x.obs.Settled:
			parts = append(parts, fmt.Sprintf("the %s side to settle (%d of %d ready)", x.role, x.obs.Ready, x.obs.Capacity))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, "; ")
}

// pauseEnd is the end of the timed pause step the rollout is at.
func pauseEnd(v *View) (time.Time, bool) {
	c, ok := v.Strategy.(strategy.Canary)
	s := &v.State
	if !ok || s.Phase != strategy.PhasePaused || int(s.StepIndex) >= len(c.Steps) || s.StepStartedAt.IsZero() {
		return time.Time{}, false
	}
	p := c.Steps[s.StepIndex].Pause
	if p == nil || p.Duration == nil {
		return time.Time{}, false
	}
	return s.StepStartedAt.Add(p.Duration.Duration), true
}

// remaining is the plan of the rest of the rollout: the exact dry run
// (strategy.Plan) from the current state, with every hop in flight taken
// as applied.
func remaining(v *View) string {
	s := v.State
	if v.Strategy == nil || s.Idle() || s.Unobserved || s.Phase.Terminal() {
		return ""
	}
	st := landed(s)
	tl, err := strategy.Plan(v.Strategy, strategy.PlanOptions{Start: v.Now, State: &st})
	if err != nil {
		return "unknown: " + err.Error()
	}
	out := fmt.Sprintf("%s and %d hops, if every hop applies at once", human(tl.Duration), tl.Hops)
	if tl.Duration == 0 {
		out = fmt.Sprintf("no timed wait, %d hops, if every hop applies at once", tl.Hops)
	}
	if gates := v.Strategy.Gates(); len(gates) > 0 && s.Phase != strategy.PhaseAborting {
		out += " and every gate passes"
	}
	if s.AwaitingResume || pausesAhead(v) {
		out += ", plus the wait for a resume"
	}
	if tl.Final.Phase != strategy.PhaseSucceeded {
		out += ", ending " + string(tl.Final.Phase)
	}
	return out
}

// pausesAhead reports a pause step without end at or after the current
// step.
func pausesAhead(v *View) bool {
	c, ok := v.Strategy.(strategy.Canary)
	if !ok || v.State.Phase == strategy.PhaseAborting {
		return false
	}
	for i := int(v.State.StepIndex); i < len(c.Steps); i++ {
		if p := c.Steps[i].Pause; p != nil && p.Duration == nil {
			return true
		}
	}
	return false
}

// landed returns s as if every hop asked for had been observed applied,
// ready and healthy, which is where Plan starts.
func landed(s strategy.State) strategy.State {
	s = *s.DeepCopy()
	o := &s.Observed
	d := s.Desired
	o.Weight, o.WeightApplied, o.WeightInvalid = d.Weight, true, false
	o.Error, o.Claimed = "", false
	o.Health, o.HealthMessage = strategy.HealthUnknown, ""
	o.Stable.Capacity, o.Stable.Ready, o.Stable.Settled = d.StableCapacity, d.StableCapacity, true
	o.Canary.Capacity, o.Canary.Ready, o.Canary.Settled = d.CanaryCapacity, d.CanaryCapacity, true
	if o.Revisions {
		o.Stable.Revision, o.Stable.Updated = s.StableRevision, true
		if d.CanaryRevision != "" {
			o.Canary.Revision, o.Canary.Updated = d.CanaryRevision, true
		}
	}
	return s
}

// recent returns the newest max events, oldest first.
func recent(evs []RecentEvent, max int) []RecentEvent {
	if max == 0 {
		max = DefaultMaxEvents
	}
	if max < 0 || len(evs) == 0 {
		return nil
	}
	out := append([]RecentEvent(nil), evs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return out
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if !t.Before(now) {
		return "now"
	}
	return human(now.Sub(t)) + " ago"
}

func human(d time.Duration) string {
	if d < time.Second {
		return "0s"
	}
	return duration.HumanDuration(d)
}

func clockTime(t time.Time) string { return t.UTC().Format("15:04:05Z") }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
