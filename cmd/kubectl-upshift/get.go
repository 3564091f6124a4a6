package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/upshift-dev/upshift/cmd/kubectl-upshift/render"
	"github.com/upshift-dev/upshift/strategy"
)

func newGet(o *options) *cobra.Command {
	var (
		follow    bool
		maxEvents int
		timeout   time.Duration
	)
	c := &cobra.Command{
		Use:   "get KIND/NAME",
		Short: "Show where a rollout stands (--watch: follow it until it ends)",
		Long: `Show where a rollout stands: each side's revision, weight, capacity, ready
share and whether it settled, the phase, the current step and what it waits
for, the conditions, recent Events and the time the rest of the plan takes.

KIND/NAME is any object: release/web, releases.upshift.example/web, or a
route whose state a standalone rollout keeps in an annotation
(httproute/web).

--watch redraws from a watch of the object and of its Events (no polling),
and exits when the rollout ends: 0 Succeeded (or nothing to roll out),
2 Aborted, 3 RolledBack, 4 Degraded for good, 5 when --timeout passes first,
7 Suspended (walked back to the stable side, waiting for resume; while it
walks back it is followed on).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := resolve(cmd.Context(), o, args[0])
			if err != nil {
				return err
			}
			o.timeout = timeout
			return get(cmd.Context(), o, t, follow, maxEvents)
		},
	}
	c.Flags().BoolVarP(&follow, "watch", "w", false, "follow the rollout until it ends")
	c.Flags().DurationVar(&timeout, "timeout", 0, "with --watch, give up after this long (exit code 5); 0 waits for ever")
	c.Flags().IntVar(&maxEvents, "events", render.DefaultMaxEvents, "the number of recent Events shown; negative shows none")
	return c
}

// screen holds what get draws.
type screen struct {
	o         *options
	t         *target
	u         *unstructured.Unstructured
	events    map[types.UID]corev1.Event
	maxEvents int
	last      []byte
}

func (s *screen) draw() error {
	r, err := s.t.read(s.u)
	if err != nil {
		return err
	}
	v := render.View{Kind: s.t.kind, Namespace: s.t.namespace, Name: s.t.name, State: r.state,
		Strategy: r.strategy, Control: r.control, Events: renderEvents(s.events), Now: s.o.now(), MaxEvents: s.maxEvents}
	var b bytes.Buffer
	if s.o.tty {
		b.WriteString("\x1b[H\x1b[2J") // home, clear
	}
	if err := render.Render(&b, v); err != nil {
		return err
	}
	if !r.found {
		fmt.Fprintf(&b, "\n(no rollout state at %s yet)\n", s.t.statePathString())
	}
	if bytes.Equal(b.Bytes(), s.last) {
		return nil
	}
	if s.last != nil && !s.o.tty {
		fmt.Fprintln(s.o.out)
	}
	s.last = b.Bytes()
	_, err = s.o.out.Write(b.Bytes())
	return err
}

func (t *target) statePathString() string {
	if t.annotated {
		return "annotation upshift.dev/rollout-state"
	}
	return t.state.String()
}

// ended reports whether the rollout of r has ended, and the exit code.
func ended(r rollout) (int, bool) {
	if r.stale || !r.found {
		return 0, false
	}
	s := &r.state
	switch {
	case s.Phase == strategy.PhaseSucceeded:
		return exitOK, true
	case s.Phase == strategy.PhaseAborted:
		return exitAborted, true
	case s.Phase == strategy.PhaseRolledBack:
		return exitRolledBk, true
	case s.Phase == strategy.PhaseSuspended:
		return exitSuspended, true // it waits for a person: resume
	case s.Idle():
		return exitOK, true
	}
	if c := meta.FindStatusCondition(s.Conditions, strategy.ConditionDegraded); c != nil && c.Status == "True" {
		switch c.Reason {
		case strategy.ReasonProgressDeadlineExceeded, strategy.ReasonInvalidState, strategy.ReasonInvalidOptions:
			return exitDegraded, true
		}
	}
	return 0, false
}

func get(ctx context.Context, o *options, t *target, follow bool, maxEvents int) error {
	u, err := t.get(ctx)
	if err != nil {
		return err
	}
	evs, evRV, err := t.events(ctx, u)
	if err != nil {
		return err
	}
	s := &screen{o: o, t: t, u: u, events: evs, maxEvents: maxEvents}
	if err := s.draw(); err != nil {
		return err
	}
	if !follow {
		return nil
	}
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	finish := func() (bool, error) {
		r, err := t.read(s.u)
		if err != nil {
			return true, err
		}
		if code, done := ended(r); done {
			if code == exitOK {
				return true, nil
			}
			return true, withCode(code, errSilent)
		}
		return false, nil
	}
	if done, err := finish(); done {
		return err
	}

	type update struct {
		obj    *unstructured.Unstructured
		events map[types.UID]corev1.Event
		event  *corev1.Event
		// dropped is an Event deleted (expired).
		dropped types.UID
		gone    bool
		err     error
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	updates := make(chan update)
	send := func(up update) {
		select {
		case updates <- up:
		case <-wctx.Done():
		}
	}
	ow := t.objectWatcher(u.GetResourceVersion(), func(u *unstructured.Unstructured) { send(update{obj: u}) })
	ew := t.eventWatcher(u, evRV, func(evs map[types.UID]corev1.Event) { send(update{events: evs}) })
	go func() {
		defer ow.stop()
		for {
			ev, err := ow.next(wctx)
			if err != nil {
				send(update{err: err})
				return
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if obj, ok := ev.Object.(*unstructured.Unstructured); ok {
					send(update{obj: obj})
				}
			case watch.Deleted:
				send(update{gone: true})
			}
		}
	}()
	go func() {
		defer ew.stop()
		for {
			ev, err := ew.next(wctx)
			if err != nil {
				if wctx.Err() == nil {
					// Events are an extra: the rollout is still followed.
					fmt.Fprintln(o.errOut, "warning: watching Events:", err)
				}
				return
			}
			if e, ok := ev.Object.(*corev1.Event); ok {
				if ev.Type == watch.Deleted {
					send(update{dropped: e.UID})
				} else {
					send(update{event: e})
				}
			}
		}
	}()
	var tick <-chan time.Time
	if o.tty { // ages and remaining times move on the screen
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		tick = tk.C
	}
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return withCode(exitTimeout, fmt.Errorf("%s: the rollout did not end within --timeout %s", t, o.timeout))
			}
			return ctx.Err()
		case <-tick:
		case up := <-updates:
			switch {
			case up.err != nil:
				if ctx.Err() != nil {
					continue // reported by the case above
				}
				return up.err
			case up.gone:
				return fmt.Errorf("%s was deleted", t)
			case up.obj != nil:
				s.u = up.obj
			case up.events != nil:
				s.events = up.events
			case up.event != nil:
				s.events[up.event.UID] = *up.event
			case up.dropped != "":
				delete(s.events, up.dropped)
			}
		}
		if err := s.draw(); err != nil {
			return err
		}
		if done, err := finish(); done {
			return err
		}
	}
}
