package drain_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/serve/drain"
)

type userKey struct{}

// serveAttached starts srv on a loopback listener and returns its base
// URL and a channel receiving Serve's error.
func serveAttached(t *testing.T, ctrl *drain.Controller, srv *http.Server) (string, <-chan error) {
	t.Helper()
	if err := ctrl.Attach(srv); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), served
}

func TestAttachedServerDrains(t *testing.T) {
	for _, userBase := range []bool{false, true} {
		name := "own BaseContext"
		if userBase {
			name = "wrapped user BaseContext"
		}
		t.Run(name, func(t *testing.T) {
			hook, transitions := recordTransitions()
			ctrl := mustNew(t, drain.Config{GracePeriod: 20 * time.Second, OnTransition: hook, Classify: classifyByPath})
			entered := make(chan struct{})
			release := make(chan struct{})
			var sawUserValue bool
			mux := http.NewServeMux()
			mux.Handle("/readyz", ctrl.ReadinessHandler())
			mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
				sawUserValue = r.Context().Value(userKey{}) != nil
				close(entered)
				<-release
				_, _ = io.WriteString(w, "finished")
			})
			srv := &http.Server{Handler: ctrl.Middleware(mux)}
			if userBase {
				srv.BaseContext = func(net.Listener) context.Context {
					return context.WithValue(context.Background(), userKey{}, "v")
				}
			}
			url, served := serveAttached(t, ctrl, srv)
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

			slow := make(chan string, 1)
			go func() {
				res, err := client.Get(url + "/slow")
				if err != nil {
					slow <- err.Error()
					return
				}
				b, _ := io.ReadAll(res.Body)
				_ = res.Body.Close()
				slow <- string(b)
			}()
			<-entered
			ctrl.Begin()

			res, err := client.Get(url + "/other")
			if err != nil {
				t.Fatal(err)
			}
			_ = res.Body.Close()
			if res.StatusCode != 503 || res.Header.Get(drain.MarkerHeader) != drain.MarkerRefused {
				t.Errorf("request during drain: %d %q, want 503 refused", res.StatusCode, res.Header.Get(drain.MarkerHeader))
			}
			res, err = client.Get(url + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			_ = res.Body.Close()
			if res.StatusCode != 503 {
				t.Errorf("readiness during drain: %d, want 503", res.StatusCode)
			}
			close(release)
			if got := <-slow; got != "finished" {
				t.Errorf("in-flight request got %q, want it finished", got)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := ctrl.Wait(ctx); err != nil {
				t.Fatalf("Wait: %v", err)
			}
			if err := <-served; !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("Serve returned %v, want ErrServerClosed", err)
			}
			if sawUserValue != userBase {
				t.Errorf("user BaseContext value seen = %v, want %v", sawUserValue, userBase)
			}
			var states []drain.State
			for _, tr := range transitions() {
				states = append(states, tr.To)
			}
			if diff := cmp.Diff([]drain.State{U, D, T, ST}, states); diff != "" {
				t.Errorf("states (-want +got):\n%s", diff)
			}
			s := ctrl.Stats()
			if s.Admitted != 1 || s.Completed != 1 || s.Refused != 1 || s.InFlight != 0 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

func TestAttachedForceCancelsThroughBaseContext(t *testing.T) {
	for _, userBase := range []bool{false, true} {
		t.Run(map[bool]string{false: "own", true: "wrapped"}[userBase], func(t *testing.T) {
			ctrl := mustNew(t, drain.Config{GracePeriod: 20 * time.Second})
			entered := make(chan struct{})
			causes := make(chan error, 1)
			srv := &http.Server{Handler: ctrl.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				<-r.Context().Done()
				causes <- context.Cause(r.Context())
			}))}
			if userBase {
				srv.BaseContext = func(net.Listener) context.Context { return context.Background() }
			}
			url, _ := serveAttached(t, ctrl, srv)
			got := make(chan *http.Response, 1)
			go func() {
				res, err := http.Get(url)
				if err != nil {
					got <- nil
					return
				}
				_ = res.Body.Close()
				got <- res
			}()
			<-entered
			ctrl.Force()
			if cause := <-causes; !errors.Is(cause, drain.ErrTerminating) {
				t.Errorf("handler context cause %v, want ErrTerminating", cause)
			}
			res := <-got
			if res == nil || res.StatusCode != 503 || res.Header.Get(drain.MarkerHeader) != drain.MarkerCancelled {
				t.Errorf("client got %+v, want 503 with the cancelled marker", res)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := ctrl.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if s := ctrl.Stats(); s.Cancelled != 1 {
				t.Errorf("stats %+v, want 1 cancelled", s)
			}
		})
	}
}

// Shutdown started by other code triggers Begin through the hook.
func TestExternalShutdownBegins(t *testing.T) {
	ctrl := mustNew(t, drain.Config{GracePeriod: 20 * time.Second, AcceptGrace: 10 * time.Second})
	srv := &http.Server{Handler: ctrl.Middleware(http.NotFoundHandler())}
	serveAttached(t, ctrl, srv)
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for ctrl.State() == drain.Serving && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if st := ctrl.State(); st != drain.Unready {
		t.Errorf("state after external Shutdown = %v, want Unready", st)
	}
	ctrl.Force()
}

// Over real HTTP/1.1, a stream cut by the drain after its headers went
// out ends with the resumable trailer.
func TestStreamTrailerOnTheWire(t *testing.T) {
	ctrl := mustNew(t, drain.Config{GracePeriod: 20 * time.Second, Classify: func(*http.Request) drain.Class { return drain.CancelOnDrain }})
	flushed := make(chan struct{})
	srv := &http.Server{Handler: ctrl.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "event 1\n")
		w.(http.Flusher).Flush()
		close(flushed)
		<-r.Context().Done()
	}))}
	url, _ := serveAttached(t, ctrl, srv)
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	<-flushed
	ctrl.Begin()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{res.Status, string(body), res.Trailer.Get(drain.MarkerHeader)}
	want := []string{"200 OK", "event 1\n", drain.MarkerResumable}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status, body, trailer (-want +got):\n%s", diff)
	}
}
