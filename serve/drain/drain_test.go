package drain_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/serve/drain"
)

func tr(from, to drain.State, d time.Duration, inflight int) drain.Transition {
	return drain.Transition{From: from, To: to, At: at(d), InFlight: inflight}
}

const (
	S  = drain.Serving
	U  = drain.Unready
	D  = drain.Draining
	T  = drain.Terminating
	ST = drain.Stopped
)

// step is one action of a timeline table test.
type step struct {
	advance time.Duration // move the clock first
	do      string        // "begin", "force", "start:<class>[:respect]", "header:<i>", "finish:<i>", ""
}

func TestTimeline(t *testing.T) {
	cfg := drain.Config{GracePeriod: 10 * time.Second, AcceptGrace: 2 * time.Second, TerminateGrace: time.Second}
	tests := []struct {
		name      string
		steps     []step
		want      []drain.Transition
		wantStats drain.Stats
	}{
		{
			name:      "idle server stops as soon as the accept grace ends",
			steps:     []step{{do: "begin"}, {advance: 2 * time.Second}},
			want:      []drain.Transition{tr(S, U, 0, 0), tr(U, D, 2*time.Second, 0), tr(D, T, 2*time.Second, 0), tr(T, ST, 2*time.Second, 0)},
			wantStats: drain.Stats{State: ST, Began: at(0)},
		},
		{
			name: "in-flight wait request finishes during draining",
			steps: []step{
				{do: "start:Wait"}, {advance: time.Second, do: "begin"},
				{advance: 4 * time.Second, do: "finish:0"}, {advance: 20 * time.Second},
			},
			want:      []drain.Transition{tr(S, U, time.Second, 1), tr(U, D, 3*time.Second, 1), tr(D, T, 5*time.Second, 0), tr(T, ST, 5*time.Second, 0)},
			wantStats: drain.Stats{State: ST, Began: at(time.Second), Admitted: 1, Completed: 1},
		},
		{
			name:      "requests during unready are still admitted",
			steps:     []step{{do: "begin"}, {advance: time.Second, do: "start:Wait"}, {advance: 500 * time.Millisecond, do: "finish:0"}, {advance: time.Second}},
			want:      []drain.Transition{tr(S, U, 0, 0), tr(U, D, 2*time.Second, 0), tr(D, T, 2*time.Second, 0), tr(T, ST, 2*time.Second, 0)},
			wantStats: drain.Stats{State: ST, Began: at(0), Admitted: 1, Completed: 1},
		},
		{
			name:      "handler that ignores cancellation is abandoned at the grace period",
			steps:     []step{{do: "start:Wait"}, {do: "begin"}, {advance: 30 * time.Second}},
			want:      []drain.Transition{tr(S, U, 0, 1), tr(U, D, 2*time.Second, 1), tr(D, T, 9*time.Second, 1), tr(T, ST, 10*time.Second, 1)},
			wantStats: drain.Stats{State: ST, Began: at(0), InFlight: 1, Admitted: 1},
		},
		{
			name:      "handler that honours cancellation ends at terminating",
			steps:     []step{{do: "start:Wait:respect"}, {do: "begin"}, {advance: 9 * time.Second}, {advance: 21 * time.Second}},
			want:      []drain.Transition{tr(S, U, 0, 1), tr(U, D, 2*time.Second, 1), tr(D, T, 9*time.Second, 1), tr(T, ST, 9*time.Second, 0)},
			wantStats: drain.Stats{State: ST, Began: at(0), Admitted: 1, Cancelled: 1},
		},
		{
			name:      "cancel-on-drain stream is cancelled at draining",
			steps:     []step{{do: "start:CancelOnDrain:respect"}, {do: "begin"}, {advance: 2 * time.Second}},
			want:      []drain.Transition{tr(S, U, 0, 1), tr(U, D, 2*time.Second, 1), tr(D, T, 2*time.Second, 0), tr(T, ST, 2*time.Second, 0)},
			wantStats: drain.Stats{State: ST, Began: at(0), Admitted: 1, Cancelled: 1},
		},
		{
			name:      "new requests are refused while draining, exempt ones pass uncounted",
			steps:     []step{{do: "start:Wait"}, {do: "begin"}, {advance: 3 * time.Second, do: "start:Wait"}, {do: "start:Exempt"}, {do: "finish:2"}, {do: "finish:0"}},
			want:      []drain.Transition{tr(S, U, 0, 1), tr(U, D, 2*time.Second, 1), tr(D, T, 3*time.Second, 0), tr(T, ST, 3*time.Second, 0)},
			wantStats: drain.Stats{State: ST, Began: at(0), Admitted: 1, Completed: 1, Refused: 1},
		},
		{
			name:      "force during draining jumps to terminating; deadlines stay those of begin",
			steps:     []step{{do: "start:Wait"}, {do: "begin"}, {advance: 3 * time.Second, do: "force"}, {advance: 20 * time.Second}},
			want:      []drain.Transition{tr(S, U, 0, 1), tr(U, D, 2*time.Second, 1), tr(D, T, 3*time.Second, 1), tr(T, ST, 10*time.Second, 1)},
			wantStats: drain.Stats{State: ST, Began: at(0), InFlight: 1, Admitted: 1},
		},
		{
			name:      "force without begin starts the grace period",
			steps:     []step{{advance: 5 * time.Second, do: "force"}},
			want:      []drain.Transition{tr(S, T, 5*time.Second, 0), tr(T, ST, 5*time.Second, 0)},
			wantStats: drain.Stats{State: ST, Began: at(5 * time.Second)},
		},
		{
			name:      "begin is idempotent",
			steps:     []step{{do: "start:Wait"}, {do: "begin"}, {advance: time.Second, do: "begin"}, {advance: time.Second, do: "begin"}, {do: "finish:0"}},
			want:      []drain.Transition{tr(S, U, 0, 1), tr(U, D, 2*time.Second, 1), tr(D, T, 2*time.Second, 0), tr(T, ST, 2*time.Second, 0)},
			wantStats: drain.Stats{State: ST, Began: at(0), Admitted: 1, Completed: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock(t0)
			hook, got := recordTransitions()
			c := cfg
			c.Clock, c.OnTransition, c.Classify = clk, hook, classifyByPath
			ctrl := mustNew(t, c)
			h := ctrl.Middleware(testHandler)
			var calls []*call
			for _, s := range tt.steps {
				clk.Advance(s.advance)
				settle(calls)
				runStep(t, ctrl, h, &calls, s.do)
				settle(calls)
			}
			if diff := cmp.Diff(tt.want, got()); diff != "" {
				t.Errorf("transitions (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantStats, ctrl.Stats()); diff != "" {
				t.Errorf("stats (-want +got):\n%s", diff)
			}
			for _, cl := range calls { // release abandoned handlers
				if cl.admitted && !cl.finished {
					cl.finish()
				}
			}
		})
	}
}

func runStep(t *testing.T, ctrl *drain.Controller, h http.Handler, calls *[]*call, do string) {
	t.Helper()
	parts := strings.Split(do, ":")
	switch parts[0] {
	case "":
	case "begin":
		ctrl.Begin()
	case "force":
		ctrl.Force()
	case "start":
		class := map[string]drain.Class{"Wait": drain.Wait, "CancelOnDrain": drain.CancelOnDrain, "Exempt": drain.Exempt}[parts[1]]
		*calls = append(*calls, start(h, class, len(parts) > 2 && parts[2] == "respect"))
	case "header", "finish":
		i, err := strconv.Atoi(parts[1])
		if err != nil || i >= len(*calls) {
			t.Fatalf("bad step %q", do)
		}
		if parts[0] == "header" {
			(*calls)[i].header()
		} else {
			(*calls)[i].finish()
		}
	default:
		t.Fatalf("bad step %q", do)
	}
}

func TestRefusal(t *testing.T) {
	tests := []struct {
		retryAfter time.Duration
		want       string
	}{
		{0, "1"},
		{time.Millisecond, "1"},
		{time.Second, "1"},
		{1500 * time.Millisecond, "2"},
		{90 * time.Second, "90"},
	}
	for _, tt := range tests {
		t.Run(tt.retryAfter.String(), func(t *testing.T) {
			ctrl := mustNew(t, drain.Config{RetryAfter: tt.retryAfter, Clock: newFakeClock(t0)})
			called := false
			h := ctrl.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true }))
			ctrl.Begin()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("body")))
			if called {
				t.Fatal("handler called for a request refused while draining")
			}
			got := map[string]any{
				"status":      rec.Code,
				"Retry-After": rec.Header().Get("Retry-After"),
				"Connection":  rec.Header().Get("Connection"),
				"marker":      rec.Header().Get(drain.MarkerHeader),
			}
			want := map[string]any{"status": 503, "Retry-After": tt.want, "Connection": "close", "marker": drain.MarkerRefused}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("refusal (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadiness(t *testing.T) {
	clk := newFakeClock(t0)
	ctrl := mustNew(t, drain.Config{GracePeriod: 10 * time.Second, AcceptGrace: 2 * time.Second, Clock: clk, Classify: classifyByPath})
	h := ctrl.Middleware(testHandler)
	cl := start(h, drain.Wait, false)
	ready := func() int {
		rec := httptest.NewRecorder()
		ctrl.ReadinessHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code
	}
	type obs struct {
		State drain.State
		Code  int
	}
	var got []obs
	record := func() { got = append(got, obs{ctrl.State(), ready()}) }
	record()
	ctrl.Begin()
	record()
	clk.Advance(2 * time.Second)
	record()
	clk.Advance(7 * time.Second)
	record()
	cl.finish()
	record()
	want := []obs{{S, 200}, {U, 503}, {D, 503}, {T, 503}, {ST, 503}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("readiness (-want +got):\n%s", diff)
	}
}

func TestCancelledResponses(t *testing.T) {
	tests := []struct {
		name        string
		class       drain.Class
		header      bool // the handler flushed headers before the drain
		force       bool // Force instead of Begin
		wantStatus  int
		wantMarker  string
		wantTrailer string
		wantCause   error
	}{
		{"stream cancelled after headers ends with resumable trailer", drain.CancelOnDrain, true, false, 200, "", drain.MarkerResumable, drain.ErrDraining},
		{"stream cancelled before headers becomes a marked 503", drain.CancelOnDrain, false, false, 503, drain.MarkerCancelled, "", drain.ErrDraining},
		{"wait request cancelled at terminating after headers", drain.Wait, true, true, 200, "", drain.MarkerResumable, drain.ErrTerminating},
		{"wait request cancelled at terminating before headers", drain.Wait, false, true, 503, drain.MarkerCancelled, "", drain.ErrTerminating},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctrl := mustNew(t, drain.Config{Clock: newFakeClock(t0), Classify: classifyByPath})
			cl := start(ctrl.Middleware(testHandler), tt.class, true)
			if tt.header {
				cl.header()
			}
			if tt.force {
				ctrl.Force()
			} else {
				ctrl.Begin()
			}
			<-cl.done
			if got := context.Cause(cl.ctx); !errors.Is(got, tt.wantCause) {
				t.Errorf("cause = %v, want %v", got, tt.wantCause)
			}
			res := cl.rec.Result()
			got := []any{res.StatusCode, res.Header.Get(drain.MarkerHeader), res.Trailer.Get(drain.MarkerHeader)}
			want := []any{tt.wantStatus, tt.wantMarker, tt.wantTrailer}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("status, marker, trailer (-want +got):\n%s", diff)
			}
			if s := ctrl.Stats(); s.Cancelled != 1 || s.Completed != 0 {
				t.Errorf("stats = %+v, want 1 cancelled, 0 completed", s)
			}
		})
	}
}

func TestCompletedIsNeverMarked(t *testing.T) {
	ctrl := mustNew(t, drain.Config{Clock: newFakeClock(t0), Classify: classifyByPath})
	h := ctrl.Middleware(testHandler)
	a := start(h, drain.CancelOnDrain, false)
	b := start(h, drain.Wait, false)
	a.header()
	a.finish() // completes before the drain
	ctrl.Begin()
	b.finish() // completes during draining: Wait is not cancelled
	for _, cl := range []*call{a, b} {
		res := cl.rec.Result()
		if res.StatusCode != 200 || res.Header.Get(drain.MarkerHeader) != "" || res.Trailer.Get(drain.MarkerHeader) != "" {
			t.Errorf("%v: status %d marker %q trailer %q; want a clean 200", cl.class, res.StatusCode,
				res.Header.Get(drain.MarkerHeader), res.Trailer.Get(drain.MarkerHeader))
		}
		if cause := context.Cause(cl.ctx); errors.Is(cause, drain.ErrDraining) || errors.Is(cause, drain.ErrTerminating) {
			t.Errorf("%v: completed request's context cancelled by the drain: %v", cl.class, cause)
		}
	}
	if diff := cmp.Diff(drain.Stats{State: ST, Began: t0, Admitted: 2, Completed: 2}, ctrl.Stats()); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

func TestPanickingHandlerIsAccounted(t *testing.T) {
	ctrl := mustNew(t, drain.Config{Clock: newFakeClock(t0)})
	h := ctrl.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	func() {
		defer func() {
			if r := recover(); r != http.ErrAbortHandler {
				t.Errorf("recovered %v, want the handler's panic", r)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	}()
	if s := ctrl.Stats(); s.InFlight != 0 || s.Completed != 1 {
		t.Errorf("stats after panic = %+v, want nothing in flight, 1 completed", s)
	}
}

func TestUnknownClassIsWait(t *testing.T) {
	ctrl := mustNew(t, drain.Config{Clock: newFakeClock(t0), Classify: func(*http.Request) drain.Class { return 42 }})
	cl := start(ctrl.Middleware(testHandler), 42, false)
	if !cl.admitted || ctrl.Stats().InFlight != 1 {
		t.Fatalf("unknown class: admitted=%v stats=%+v, want counted like Wait", cl.admitted, ctrl.Stats())
	}
	ctrl.Begin()
	if ctrl.State() != D || cl.ctx.Err() != nil {
		t.Errorf("state %v, ctx err %v: an unknown class must wait like Wait", ctrl.State(), cl.ctx.Err())
	}
	cl.finish()
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name       string
		cfg        drain.Config
		wantFields []string
	}{
		{"zero config is valid", drain.Config{}, nil},
		{"negatives", drain.Config{GracePeriod: -1, AcceptGrace: -1, TerminateGrace: -1, RetryAfter: -1},
			[]string{"GracePeriod", "AcceptGrace", "TerminateGrace", "RetryAfter"}},
		{"terminate grace longer than grace", drain.Config{GracePeriod: time.Second, TerminateGrace: 2 * time.Second}, []string{"TerminateGrace"}},
		{"accept grace leaves no time", drain.Config{GracePeriod: 10 * time.Second, AcceptGrace: 9500 * time.Millisecond}, []string{"AcceptGrace"}},
		{"exact fit", drain.Config{GracePeriod: 10 * time.Second, AcceptGrace: 9 * time.Second, TerminateGrace: time.Second}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			var fields []string
			for _, e := range unjoin(err) {
				var ce *drain.ConfigError
				if !errors.As(e, &ce) || !errors.Is(e, drain.ErrInvalid) {
					t.Fatalf("error %v is not a *ConfigError matching ErrInvalid", e)
				}
				if !strings.Contains(e.Error(), ce.Field) || !strings.HasPrefix(e.Error(), "drain: ") {
					t.Errorf("message %q must start with \"drain: \" and name field %s", e, ce.Field)
				}
				fields = append(fields, ce.Field)
			}
			if diff := cmp.Diff(tt.wantFields, fields); diff != "" {
				t.Errorf("invalid fields (-want +got):\n%s", diff)
			}
			if _, nerr := drain.New(tt.cfg); (nerr == nil) != (err == nil) {
				t.Errorf("New error %v disagrees with Validate %v", nerr, err)
			}
		})
	}
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestStrings(t *testing.T) {
	got := []string{S.String(), U.String(), D.String(), T.String(), ST.String(), drain.State(9).String(),
		drain.Wait.String(), drain.CancelOnDrain.String(), drain.Exempt.String(), drain.Class(-1).String()}
	want := []string{"Serving", "Unready", "Draining", "Terminating", "Stopped", "State(9)", "Wait", "CancelOnDrain", "Exempt", "Class(-1)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestWait(t *testing.T) {
	ctrl := mustNew(t, drain.Config{Clock: newFakeClock(t0)})
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("gave up"))
	if err := ctrl.Wait(ctx); err == nil || err.Error() != "gave up" {
		t.Errorf("Wait on a cancelled context = %v, want its cause", err)
	}
	ctrl.Begin()
	if err := ctrl.Wait(context.Background()); err != nil {
		t.Errorf("Wait after an idle drain = %v", err)
	}
	select {
	case <-ctrl.Done():
	default:
		t.Error("Done not closed at Stopped")
	}
}

func TestAttachErrors(t *testing.T) {
	ctrl := mustNew(t, drain.Config{Clock: newFakeClock(t0)})
	if err := ctrl.Attach(nil); !errors.Is(err, drain.ErrNilServer) {
		t.Errorf("Attach(nil) = %v, want ErrNilServer", err)
	}
	ctrl.Force()
	if err := ctrl.Attach(&http.Server{}); !errors.Is(err, drain.ErrTooLate) {
		t.Errorf("Attach after Force = %v, want ErrTooLate", err)
	}
}

// A hook that calls back into the controller must not deadlock, and
// transitions arrive in order.
func TestHookMayCallController(t *testing.T) {
	var states []drain.State
	var ctrl *drain.Controller
	ctrl = mustNew(t, drain.Config{Clock: newFakeClock(t0), OnTransition: func(tr drain.Transition) {
		states = append(states, ctrl.Stats().State)
		ctrl.Begin()
		ctrl.Force()
	}})
	ctrl.Begin()
	if diff := cmp.Diff([]drain.State{ST, ST, ST, ST}, states); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// With the wall clock inside a synctest bubble: Begin -> Stopped takes
// exactly the grace period when a handler ignores its context.
func TestWallClockGracePeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		hook, transitions := recordTransitions()
		ctrl := mustNew(t, drain.Config{GracePeriod: 30 * time.Second, AcceptGrace: 5 * time.Second, TerminateGrace: 3 * time.Second, OnTransition: hook})
		release := make(chan struct{})
		h := ctrl.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
		go h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
		synctest.Wait()
		ctrl.Begin()
		<-ctrl.Done()
		type step struct {
			To    drain.State
			After time.Duration
		}
		var got []step
		for _, tr := range transitions() {
			got = append(got, step{tr.To, tr.At.Sub(start)})
		}
		want := []step{{U, 0}, {D, 5 * time.Second}, {T, 27 * time.Second}, {ST, 30 * time.Second}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("timeline (-want +got):\n%s", diff)
		}
		close(release)
		synctest.Wait()
		if s := ctrl.Stats(); s.InFlight != 0 || s.Cancelled != 1 {
			t.Errorf("stats %+v", s)
		}
	})
}

func TestZeroController(t *testing.T) {
	var ctrl drain.Controller
	h := ctrl.Middleware(nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("nil handler answered %d, want 404", rec.Code)
	}
	ctrl.Begin() // nothing in flight, no accept grace: straight to Stopped
	select {
	case <-ctrl.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("zero controller did not stop")
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	want := drain.Stats{State: ST, Began: ctrl.Stats().Began, Admitted: 1, Completed: 1, Refused: 1}
	if diff := cmp.Diff(want, ctrl.Stats()); diff != "" || rec.Code != 503 {
		t.Errorf("status %d; stats (-want +got):\n%s", rec.Code, diff)
	}
}
