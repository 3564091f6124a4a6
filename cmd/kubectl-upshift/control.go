package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/upshift-dev/upshift/cmd/kubectl-upshift/internal/object"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/strategy"
)

// controlCmd is one of the commands that write a strategy.Control request.
type controlCmd struct {
	use, short string
	// command is the strategy.Command* it applies.
	command string
	// field is the request's JSON field in strategy.Control; "" for pause.
	field string
	// handled returns the last value of the request the state has seen.
	handled func(*strategy.Requests) string
	// long is the part of the help proper to the command.
	long string
}

var controls = []controlCmd{
	{use: "pause", short: "Hold the rollout where it is (sets control.paused)", command: strategy.CommandPause},
	{use: "suspend", short: "Walk traffic and capacity back to the stable side and release the canary until resumed (sets control.suspended)", command: strategy.CommandSuspend,
		long: `suspend sets control.suspended (it stays set until resume clears it) and
follows the rollout until it reports phase Suspended: all traffic and
capacity back on the stable side (the walk back of an abort, stable capacity
first, without Degraded), the canary side at capacity 0, the weight it stood
at and its step kept. It exits 0 once the rollout is Suspended, and at once
when there is nothing to suspend (no rollout, or one that ended; an abort's
walk back ends Aborted): the spec stays suspended, and the next rollout is
suspended before its first step. The walk back follows the strategy's
abortRamp: a long one may outlast --timeout (exit 5; the suspension goes
on, get --watch follows it and exits 7 once it is Suspended).`},
	{use: "resume", short: "Clear control.suspended and control.paused, then end the pause still in force (a pause step, an inconclusive gate, an unhealthy hold)", command: strategy.CommandResume, field: "resume",
		handled: func(r *strategy.Requests) string { return r.Resume },
		long: `resume first clears control.suspended and control.paused, those set, and
waits until the rollout no longer holds on them. A suspended rollout
resumes: it walks the canary back up to the weight it stood at (capacity
first) and enters its step again, and resume stops there (a pause step
holds it again: resume once more passes it). Otherwise, when a pause is
still in force, it writes the resume request.`},
	{use: "promote", short: "Finish the current step now (a pause, a gate, an interval)", command: strategy.CommandPromote, field: "promote",
		handled: func(r *strategy.Requests) string { return r.Promote }},
	{use: "promote-full", short: "Walk to weight 100 now, skipping every remaining step", command: strategy.CommandPromoteFull, field: "promoteFull",
		handled: func(r *strategy.Requests) string { return r.PromoteFull }},
	{use: "abort", short: "Walk traffic back to the stable side", command: strategy.CommandAbort, field: "abort",
		handled: func(r *strategy.Requests) string { return r.Abort }},
	{use: "retry", short: "Start an aborted rollout again", command: strategy.CommandRetry, field: "retry",
		handled: func(r *strategy.Requests) string { return r.Retry }},
}

func newControl(o *options, cc controlCmd) *cobra.Command {
	var timeout time.Duration
	c := &cobra.Command{
		Use:   cc.use + " KIND/NAME",
		Short: cc.short,
		Long: cc.short + `.

It writes the request into the object's control (--control-path, .spec.control
by default; for a route, the upshift.dev/rollout-control annotation) with a
JSON merge patch and a fresh token (pause and suspend set a flag instead:
paused, suspended), checks that the API server's answer holds
it (a field the object's schema lacks is pruned: an error at once, naming the
CRD), then follows the object (a watch, for at most --timeout) until the
rollout reports what it did with it. Exit codes: 0 applied, 6 used up without
effect (it did not apply to the rollout as it stood), 5 no answer within
--timeout, 1 error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := resolve(cmd.Context(), o, args[0])
			if err != nil {
				return err
			}
			o.timeout = timeout
			return control(cmd.Context(), o, t, cc)
		},
	}
	if cc.long != "" {
		c.Long += "\n\n" + cc.long
	}
	c.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the rollout to answer; 0 does not wait")
	return c
}

// newToken returns a request value never written before: the instant, to
// the nanosecond.
func newToken(now time.Time) string { return now.UTC().Format("20060102T150405.000000000Z") }

func control(ctx context.Context, o *options, t *target, cc controlCmd) error {
	wctx, cancel := context.WithTimeout(ctx, max(o.timeout, 0))
	defer cancel()
	if cc.command == strategy.CommandResume {
		// Clear control.suspended and control.paused first: a suspension
		// ends, the pause it holds ends, and a pause step it had taken
		// over is handed back to the step, which the resume request below
		// then passes.
		done, err := unhold(ctx, wctx, o, t)
		if done || err != nil {
			return err
		}
	}
	token := ""
	fields := map[string]any{}
	switch cc.command {
	case strategy.CommandPause:
		fields["paused"] = true
	case strategy.CommandSuspend:
		fields["suspended"] = true
	default:
		token = newToken(o.now())
		fields[cc.field] = token
	}
	u, err := t.writeControl(ctx, fields)
	if err != nil {
		return err
	}
	what := cc.command
	if token != "" {
		what += " " + token
	}
	fmt.Fprintf(o.out, "%s: %s requested\n", t, what)
	if o.timeout <= 0 {
		return nil
	}
	r, err := t.read(u)
	if err != nil {
		return err
	}
	if cc.command == strategy.CommandPause && !holdable(&r.state) {
		fmt.Fprintf(o.out, "%s: nothing to hold now (%s); the spec stays paused for the next rollout\n", t, phaseOf(&r.state))
		return nil
	}
	if cc.command == strategy.CommandSuspend && !suspendable(&r.state) {
		fmt.Fprintf(o.out, "%s: %s\n", t, nothingToSuspend(&r.state))
		return nil
	}
	u, r, err = t.await(wctx, u, func(r *rollout) bool {
		switch cc.command {
		case strategy.CommandPause:
			return r.state.AwaitingResume && r.state.PauseReason == strategy.ReasonControlPause || !holdable(&r.state)
		case strategy.CommandSuspend:
			return !r.stale && (r.state.Phase == strategy.PhaseSuspended || !suspendable(&r.state))
		}
		return cc.handled(&r.state.Handled) == token
	})
	if err != nil {
		if cc.command == strategy.CommandSuspend && suspension(&r.state) != "" && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return withCode(exitTimeout, fmt.Errorf("%s: still walking back to the stable side after --timeout %s (canary weight %d): the suspension goes on; get --watch follows it",
				t, o.timeout, r.state.Observed.Weight))
		}
		return timedOut(ctx, o, t, what, err)
	}
	if cc.command == strategy.CommandSuspend && r.state.Phase != strategy.PhaseSuspended {
		fmt.Fprintf(o.out, "%s: %s\n", t, nothingToSuspend(&r.state))
		return nil
	}
	// The state records that the request was seen, and whether it was
	// ignored (status.ignored); an Event of the controller naming the
	// token, when it records one, adds its words (and says whether it was
	// ignored for a controller whose states predate that record).
	ignored, note := false, ""
	if token != "" {
		ignored = cc.handled(&r.state.Ignored) == token
		var warned bool
		warned, note = t.controlEvent(wctx, u, token)
		ignored = ignored || warned
	}
	fmt.Fprintf(o.out, "%s: %s\n", t, outcome(cc, &r.state, ignored, note))
	if ignored {
		return withCode(exitIgnored, errSilent)
	}
	return nil
}

// unhold clears control.suspended and control.paused, those set, and
// waits until the rollout no longer holds on them; done reports that
// nothing is left for a resume request: a suspension ended (its step,
// entered again, is the rollout's own), or nothing is left paused.
func unhold(ctx, wctx context.Context, o *options, t *target) (done bool, err error) {
	u, err := t.get(ctx)
	if err != nil {
		return false, err
	}
	r, err := t.read(u)
	if err != nil || r.control == nil || !r.control.Paused && !r.control.Suspended {
		return false, err
	}
	fields, cleared := map[string]any{}, []string{}
	if r.control.Suspended {
		fields["suspended"], cleared = false, append(cleared, "control.suspended")
	}
	if r.control.Paused {
		fields["paused"], cleared = false, append(cleared, "control.paused")
	}
	// A suspension the spec caused ends with it; a suspension that the
	// status does not show yet is not waited for.
	wasSuspended := !r.stale && suspension(&r.state) == strategy.ReasonControlSuspend
	if u, err = t.writeControl(ctx, fields); err != nil {
		return false, err
	}
	fmt.Fprintf(o.out, "%s: %s cleared\n", t, strings.Join(cleared, " and "))
	if o.timeout <= 0 {
		return r.control.Suspended, nil
	}
	_, r, err = t.await(wctx, u, func(r *rollout) bool {
		return !r.stale && !(r.state.AwaitingResume && r.state.PauseReason == strategy.ReasonControlPause) &&
			suspension(&r.state) != strategy.ReasonControlSuspend
	})
	if err != nil {
		return false, timedOut(ctx, o, t, strings.Join(cleared, " and ")+" cleared", err)
	}
	if r.state.AwaitingResume && !wasSuspended {
		return false, nil // the step's pause (or another): resume it too
	}
	note := "unpaused"
	if wasSuspended {
		note = "resumed"
	}
	fmt.Fprintf(o.out, "%s: %s\n", t, outcome(controlCmd{command: strategy.CommandResume}, &r.state, false, note))
	return true, nil
}

func timedOut(ctx context.Context, o *options, t *target, what string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return withCode(exitTimeout, fmt.Errorf("%s: the rollout did not answer %s within --timeout %s: is its controller running?", t, what, o.timeout))
	}
	return err
}

// await follows the object from u until cond holds of its rollout.
func (t *target) await(ctx context.Context, u *unstructured.Unstructured, cond func(*rollout) bool) (*unstructured.Unstructured, rollout, error) {
	r, err := t.read(u)
	if err != nil {
		return u, r, err
	}
	w := t.objectWatcher(u.GetResourceVersion(), func(x *unstructured.Unstructured) { u = x })
	defer w.stop()
	for !cond(&r) {
		ev, err := w.next(ctx)
		if err != nil {
			return u, r, err
		}
		switch ev.Type {
		case watch.Deleted:
			return u, r, fmt.Errorf("%s was deleted", t)
		case watch.Added, watch.Modified:
			if x, ok := ev.Object.(*unstructured.Unstructured); ok {
				u = x
			}
		}
		if r, err = t.read(u); err != nil {
			return u, r, err
		}
	}
	return u, r, nil
}

func holdable(s *strategy.State) bool {
	return !s.Idle() && !s.Phase.Terminal() && s.Phase != strategy.PhaseAborting
}

// suspension returns the reason of the suspension s is in (walking back
// or walked back: strategy.ReasonSuspended or ReasonControlSuspend), ""
// when it is in none.
func suspension(s *strategy.State) string {
	if a := s.Aborted; a != nil && (s.Phase == strategy.PhaseSuspended || s.Phase == strategy.PhaseAborting) &&
		(a.Reason == strategy.ReasonSuspended || a.Reason == strategy.ReasonControlSuspend) {
		return a.Reason
	}
	if s.Phase == strategy.PhaseSuspended {
		return strategy.ReasonSuspended
	}
	return ""
}

// suspendable reports whether control.suspended suspends the rollout of
// s: one that runs (a Retarget's walk back too) or is suspended, not an
// idle or ended one, nor an abort's walk back (which ends Aborted).
func suspendable(s *strategy.State) bool {
	switch {
	case s.Idle() || s.Phase.Terminal() && s.Phase != strategy.PhaseSuspended:
		return false
	case s.Phase == strategy.PhaseAborting:
		return s.Aborted != nil && (s.Aborted.Reason == strategy.ReasonRetarget || suspension(s) != "")
	}
	return true
}

func nothingToSuspend(s *strategy.State) string {
	return fmt.Sprintf("nothing to suspend now (%s); the spec stays suspended: the next rollout is suspended before its first step", phaseOf(s))
}

func phaseOf(s *strategy.State) string {
	if s.Idle() {
		return "idle"
	}
	return string(s.Phase)
}

func outcome(cc controlCmd, s *strategy.State, ignored bool, note string) string {
	head := cc.command + " applied"
	if ignored {
		head = cc.command + " ignored: it does not apply to the rollout as it stands"
	} else if note == "" && cc.command != strategy.CommandPause && cc.command != strategy.CommandSuspend {
		head = cc.command + " seen by the rollout"
	}
	line := fmt.Sprintf("%s; now %s, canary weight %d", head, phaseOf(s), s.Observed.Weight)
	if s.AwaitingResume {
		line += ", paused (" + s.PauseReason + ")"
	}
	if s.Message != "" && s.Message != string(s.Phase) {
		line += ": " + s.Message
	}
	switch {
	case s.Phase == strategy.PhaseSuspended && s.StartedAt.IsZero():
		line += " (resume starts it)"
	case s.Phase == strategy.PhaseSuspended:
		line += fmt.Sprintf(" (resume continues from weight %d)", s.ResumeWeight)
	case s.ResumeWeight > 0:
		line += fmt.Sprintf(" (walking back up to weight %d)", s.ResumeWeight)
	}
	return line
}

// controlEvent looks for the controller's Event about token (the example
// operator records one for every request, Warning when ignored), waiting
// for it a few seconds at most: Events are recorded asynchronously.
func (t *target) controlEvent(ctx context.Context, u *unstructured.Unstructured, token string) (ignored bool, note string) {
	evs, rv, err := t.events(ctx, u)
	if err != nil {
		return false, ""
	}
	match := func(e *corev1.Event) (bool, string) {
		if strings.Contains(e.Message, token) {
			return true, e.Type
		}
		return false, ""
	}
	for _, e := range evs {
		if ok, typ := match(&e); ok {
			return typ == corev1.EventTypeWarning, e.Message
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	w := t.eventWatcher(u, rv, func(map[types.UID]corev1.Event) {})
	defer w.stop()
	for {
		ev, err := w.next(ctx)
		if err != nil {
			return false, ""
		}
		if e, ok := ev.Object.(*corev1.Event); ok {
			if ok, typ := match(e); ok {
				return typ == corev1.EventTypeWarning, e.Message
			}
		}
	}
}

// writeControl sets fields of the object's control with a merge patch (on
// a route: of the control annotation, with the resource version as a
// precondition, retried on conflicts).
func (t *target) writeControl(ctx context.Context, fields map[string]any) (*unstructured.Unstructured, error) {
	if !t.annotated {
		patch, err := object.MergePatch(t.control, fields)
		if err != nil {
			return nil, err
		}
		pctx, warns := collectWarnings(ctx)
		u, err := t.dyn.Patch(pctx, t.name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return nil, fmt.Errorf("%s: writing %s: %w", t, t.control, err)
		}
		// The answer is the object as stored: a field the schema lacks is
		// pruned from it (with a warning), and the request is lost.
		if err := checkKept(t.String(), u, t.control, fields, warns.all(), func() string { return t.schemaName(ctx) }); err != nil {
			return nil, withCode(exitError, err)
		}
		return u, nil
	}
	for attempt := 0; ; attempt++ {
		u, err := t.get(ctx)
		if err != nil {
			return nil, err
		}
		cur := map[string]any{}
		if raw, ok := u.GetAnnotations()[gateway.ControlAnnotation]; ok {
			if err := json.Unmarshal([]byte(raw), &cur); err != nil {
				return nil, fmt.Errorf("%s: annotation %s: %w", t, gateway.ControlAnnotation, err)
			}
		}
		for k, v := range fields {
			cur[k] = v
		}
		for _, k := range []string{"paused", "suspended"} {
			if b, ok := cur[k].(bool); ok && !b {
				delete(cur, k)
			}
		}
		val, err := json.Marshal(cur)
		if err != nil {
			return nil, err
		}
		var c strategy.Control // what the Runner reads must decode
		if err := json.Unmarshal(val, &c); err != nil {
			return nil, fmt.Errorf("%s: annotation %s: %w", t, gateway.ControlAnnotation, err)
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": u.GetResourceVersion(),
			"annotations":     map[string]any{gateway.ControlAnnotation: string(val)},
		}})
		if err != nil {
			return nil, err
		}
		pctx, warns := collectWarnings(ctx)
		u, err = t.dyn.Patch(pctx, t.name, types.MergePatchType, patch, metav1.PatchOptions{})
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: writing annotation %s: %w", t, gateway.ControlAnnotation, err)
		}
		// Annotations are never pruned; the answer is checked all the same.
		if got, ok := u.GetAnnotations()[gateway.ControlAnnotation]; !ok || got != string(val) {
			var g any
			if ok {
				g = got
			}
			return nil, withCode(exitError, &NotKeptError{Object: t.String(), Field: "annotation " + gateway.ControlAnnotation,
				Want: string(val), Got: g, Warnings: warns.all()})
		}
		return u, nil
	}
}
