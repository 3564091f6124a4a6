package ray

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
)

// wire carries the adapter's requests to an emulated cluster in process
// and keeps, as the adapter should, the last answer to a GET: its body,
// the clock's time when it was sent, and whether a PUT was sent since.
type wire struct {
	h   http.Handler
	clk *fake.Clock

	mu      sync.Mutex
	gets    int
	last    []byte
	lastAt  time.Time
	kept    bool // a GET was answered and no PUT sent since
	failing bool // the next request is answered 503
}

func (w *wire) RoundTrip(req *http.Request) (*http.Response, error) {
	w.mu.Lock()
	at := w.clk.Now()
	fail := w.failing
	w.failing = false
	switch req.Method {
	case http.MethodGet:
		w.gets++
	case http.MethodPut:
		w.kept = false // whether it fails or not
	}
	w.mu.Unlock()
	rec := httptest.NewRecorder()
	if fail {
		http.Error(rec, "unavailable", http.StatusServiceUnavailable)
	} else {
		w.h.ServeHTTP(rec, req)
	}
	resp := rec.Result()
	if req.Method == http.MethodGet && resp.StatusCode == http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		w.mu.Lock()
		w.last, w.lastAt, w.kept = body, at, true
		w.mu.Unlock()
	}
	return resp, nil
}

// TestReuseProperty: in any sequence of reads (Observe, Deployer.Revision),
// writes (SetCapacity, Deploy), clock moves (which fire the polls of
// Notify, when subscribed), moves of the cluster behind the adapter's back
// and failed requests, a read sends a GET exactly when the last answer is
// as old as ReadMaxAge or older, or was read before a write of the
// adapter (or there is none, or reuse is off); a read that sends none
// reports what that last answer says. So no read ever reports an answer
// older than ReadMaxAge, nor one read before the adapter's last write.
func TestReuseProperty(t *testing.T) {
	revs := map[string]json.RawMessage{
		"v1": json.RawMessage(`{"applications": [{"name": "app", "import_path": "a:app", "deployments": [{"name": "D", "num_replicas": 4}, {"name": "E", "num_replicas": 3}]}]}`),
		"v2": json.RawMessage(`{"applications": [{"name": "app", "import_path": "a:v2", "deployments": [{"name": "D", "num_replicas": 4}, {"name": "E", "num_replicas": 3}]}]}`),
	}
	rapid.Check(t, func(t *rapid.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		clk := fake.NewClock(time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC))
		rs := raytest.New(raytest.Options{
			BuildPolls: rapid.IntRange(0, 2).Draw(t, "build"),
			StartPolls: rapid.IntRange(0, 3).Draw(t, "start"),
			StopPolls:  rapid.IntRange(0, 2).Draw(t, "stop"),
			Clock:      clk,
		})
		w := &wire{h: rs, clk: clk}
		maxAge := rapid.SampledFrom([]time.Duration{-1, 0, 300 * time.Millisecond, time.Second, 3 * time.Second}).Draw(t, "maxAge")
		r, err := New(Config{Dashboard: "http://ray.test", Revisions: RevisionMap(revs), Clock: clk, ReadMaxAge: maxAge,
			HTTPClient: &http.Client{Transport: w}})
		if err != nil {
			t.Fatal(err)
		}
		dp, _ := r.Deployer()
		if maxAge == 0 {
			maxAge = DefaultNotifyMaxInterval
		}
		if rapid.Bool().Draw(t, "notify") {
			if err := r.Notify(ctx, func() {}); err != nil {
				t.Fatal(err)
			}
		}
		// read runs a read and checks it against the wire's last answer.
		read := func(what string, f func() error) error {
			w.mu.Lock()
			fresh := w.kept && maxAge > 0 && clk.Now().Sub(w.lastAt) < maxAge
			gets := w.gets
			w.mu.Unlock()
			err := f()
			w.mu.Lock()
			sent := w.gets != gets
			w.mu.Unlock()
			switch {
			case fresh && sent:
				t.Fatalf("%s sent a GET with an answer %v old kept and no write since (max age %v)", what, clk.Now().Sub(w.lastAt), maxAge)
			case !fresh && !sent:
				t.Fatalf("%s sent no GET: the last answer is %v old (max age %v), kept %v", what, clk.Now().Sub(w.lastAt), maxAge, w.kept)
			case err != nil && !sent:
				t.Fatalf("%s: an error without a GET: %v", what, err)
			}
			return err
		}
		for range rapid.IntRange(1, 40).Draw(t, "steps") {
			switch rapid.IntRange(0, 7).Draw(t, "op") {
			case 0, 1:
				var got ServeStatus
				if read("Observe", func() (err error) {
					got, err = r.Observe(ctx)
					return err
				}) != nil {
					continue
				}
				d, err := decodeInstanceDetails(w.last)
				if err != nil {
					t.Fatal(err)
				}
				if want := r.observe(d); !reflect.DeepEqual(want, got) {
					t.Fatalf("Observe reported %+v; the last answer says %+v", got, want)
				}
			case 2:
				_ = read("Revision", func() error {
					_, err := dp.Revision(ctx, rapid.SampledFrom([]string{"v1", "v2"}).Draw(t, "expect"))
					return err
				})
			case 3:
				req := rollout.CapacityRequest{Percent: int32(rapid.IntRange(0, 100).Draw(t, "percent"))}
				if rapid.IntRange(0, 4).Draw(t, "steady") == 0 {
					req = rollout.CapacityRequest{Percent: 100, Steady: true}
				}
				_ = r.SetCapacity(ctx, req) // refusals are fine here
			case 4:
				_ = dp.Deploy(ctx, rapid.SampledFrom([]string{"v1", "v2"}).Draw(t, "revision"))
			case 5:
				clk.Advance(time.Duration(rapid.IntRange(0, 3000).Draw(t, "ms")) * time.Millisecond)
			case 6:
				rs.Advance(rapid.IntRange(1, 3).Draw(t, "moves"))
			case 7:
				w.mu.Lock()
				w.failing = true
				w.mu.Unlock()
			}
		}
	})
}
