package measure_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/kubetest/measure"
)

// send sends one request through client and drops the answer.
func send(t *testing.T, client *http.Client, method, url string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func TestCounter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/conflict":
			w.WriteHeader(http.StatusConflict)
		case "/busy":
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	var c measure.Counter
	client := &http.Client{Transport: c.Wrap(http.DefaultTransport)}
	do := func(method, path string) { t.Helper(); send(t, client, method, srv.URL+path) }
	do(http.MethodGet, "/a")
	before, mark := c.Counts(), c.Mark()
	do(http.MethodGet, "/a?watch=true")
	do(http.MethodGet, "/a")
	do(http.MethodPut, "/conflict")
	do(http.MethodPatch, "/busy")
	do(http.MethodDelete, "/a")
	// A request that gets no answer.
	if _, err := (&http.Client{Transport: c.Wrap(http.DefaultTransport)}).Get("http://127.0.0.1:0/"); err == nil {
		t.Fatal("a request to port 0 succeeded")
	}

	want := measure.Counts{Reads: 3, Writes: 3, Watches: 1, Conflicts: 1, TooMany: 1, Failed: 1}
	if diff := cmp.Diff(want, c.Counts()); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(measure.Counts{Reads: 2, Writes: 3, Watches: 1, Conflicts: 1, TooMany: 1, Failed: 1}, c.Counts().Minus(before)); diff != "" {
		t.Errorf("counts since the first read (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(measure.Counts{Reads: 6, Writes: 6, Watches: 2, Conflicts: 2, TooMany: 2, Failed: 2}, c.Counts().Plus(c.Counts())); diff != "" {
		t.Errorf("Plus (-want +got):\n%s", diff)
	}
	reads, writes := c.Latencies(mark)
	// The failed GET has a latency too: 2 reads since the mark.
	if len(reads) != 2 || len(writes) != 3 {
		t.Errorf("latencies since the mark: %d reads, %d writes; want 2, 3", len(reads), len(writes))
	}
	all, _ := c.Latencies(measure.Mark{})
	if len(all) != 3 {
		t.Errorf("read latencies: %d, want 3", len(all))
	}
}

func TestQuantile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0, 1}, {0.2, 1}, {0.5, 3}, {0.99, 5}, {1, 5}} {
		if got := measure.Quantile(ds, tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if diff := cmp.Diff([]time.Duration{5, 1, 4, 2, 3}, ds); diff != "" {
		t.Errorf("Quantile changed its input (-want +got):\n%s", diff)
	}
	if got := measure.Quantile(nil, 0.5); got != 0 {
		t.Errorf("Quantile(nil) = %v, want 0", got)
	}
}

func TestProcStatOwnProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	// Burn some CPU so the process has ticks to report.
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = strings.Repeat("x", x%64)
	}
	a := measure.SampleCPU(map[string]int{"self-again": os.Getpid()})
	ppid, comm, ticks := measure.ProcStat(os.Getpid())
	if ppid != os.Getppid() {
		t.Errorf("ProcStat: parent %d, want %d", ppid, os.Getppid())
	}
	if comm == "" || !strings.HasPrefix(os.Args[0][strings.LastIndexByte(os.Args[0], '/')+1:], comm) {
		t.Errorf("ProcStat: command %q, not a prefix of %q", comm, os.Args[0])
	}
	if ticks < a.Procs["test"] {
		t.Errorf("ProcStat: %d ticks, fewer than the sample's %d before", ticks, a.Procs["test"])
	}
	if a.Cores < 1 || a.Busy <= 0 || a.Ours < a.Procs["test"] || a.Procs["self-again"] < a.Procs["test"] {
		t.Errorf("sample %+v: want cores, busy ticks, ours >= test, self-again >= test", a)
	}
	b := measure.SampleCPU(nil)
	if all, ours := measure.CPUUse(a, b); all < 0 || ours < 0 {
		t.Errorf("CPUUse = %v, %v: negative", all, ours)
	}
	if all, ours := measure.CPUUse(b, a); all != 0 || ours != 0 {
		t.Errorf("CPUUse backwards = %v, %v, want 0, 0", all, ours)
	}
	if ppid, comm, ticks := measure.ProcStat(-1); ppid != 0 || comm != "" || ticks != 0 {
		t.Errorf("ProcStat(-1) = %d, %q, %d; want zeros", ppid, comm, ticks)
	}
}
