package drain_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/upshift-dev/upshift/serve/drain"
)

// A server drains: readiness fails first while requests are still
// served, then new requests are refused with a marked 503. The manual
// clock makes the example deterministic; production code leaves Clock
// nil.
func ExampleController() {
	clk := newFakeClock(t0)
	ctrl, err := drain.New(drain.Config{
		GracePeriod: 30 * time.Second,
		AcceptGrace: 5 * time.Second,
		Clock:       clk,
		Classify: func(r *http.Request) drain.Class {
			if r.URL.Path == "/readyz" {
				return drain.Exempt
			}
			return drain.Wait
		},
		OnTransition: func(tr drain.Transition) {
			fmt.Printf("  %v -> %v at +%v\n", tr.From, tr.To, tr.At.Sub(t0))
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/readyz", ctrl.ReadinessHandler())
	mux.HandleFunc("/hello", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") })
	h := ctrl.Middleware(mux)
	get := func(path string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Printf("GET %s: %d", path, rec.Code)
		if m := rec.Header().Get(drain.MarkerHeader); m != "" {
			fmt.Printf(" Retry-After=%s %s=%s", rec.Header().Get("Retry-After"), drain.MarkerHeader, m)
		}
		fmt.Println()
	}

	get("/readyz")
	ctrl.Begin()
	get("/readyz")
	get("/hello")
	clk.Advance(5 * time.Second)
	get("/hello")
	s := ctrl.Stats()
	fmt.Printf("%v: admitted %d, completed %d, refused %d\n", s.State, s.Admitted, s.Completed, s.Refused)
	// Output:
	// GET /readyz: 200
	//   Serving -> Unready at +0s
	// GET /readyz: 503
	// GET /hello: 200
	//   Unready -> Draining at +5s
	//   Draining -> Terminating at +5s
	//   Terminating -> Stopped at +5s
	// GET /hello: 503 Retry-After=1 Upshift-Drain=refused
	// Stopped: admitted 1, completed 1, refused 1
}

// Config.Validate reports every problem at once, naming the field.
func ExampleConfig_Validate() {
	err := drain.Config{GracePeriod: 10 * time.Second, AcceptGrace: -time.Second, RetryAfter: -1}.Validate()
	fmt.Println(err)
	// Output:
	// drain: invalid config: AcceptGrace: must not be negative, got -1s
	// drain: invalid config: RetryAfter: must not be negative, got -1ns
}
