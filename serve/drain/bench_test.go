package drain_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/upshift-dev/upshift/serve/drain"
)

// nopWriter is a ResponseWriter that allocates nothing per request.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = w.Write([]byte("ok"))
})

func serveLoop(b *testing.B, h http.Handler, r *http.Request) {
	w := &nopWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r)
	}
}

// reportRatio adds the cost relative to the bare handler as a metric.
func reportRatio(b *testing.B, base float64) {
	if base > 0 && b.N > 0 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/base, "x-bare")
	}
}

// BenchmarkMiddleware measures the per-request cost of the middleware
// in process, against the same handler called bare.
func BenchmarkMiddleware(b *testing.B) {
	ctrl, err := drain.New(drain.Config{Classify: func(r *http.Request) drain.Class {
		if r.URL.Path == "/stream" {
			return drain.CancelOnDrain
		}
		return drain.Wait
	}})
	if err != nil {
		b.Fatal(err)
	}
	mw := ctrl.Middleware(okHandler)
	// A request context as an attached server creates it.
	srv := &http.Server{}
	if err := ctrl.Attach(srv); err != nil {
		b.Fatal(err)
	}
	attachedCtx, cancel := context.WithCancel(srv.BaseContext(nil))
	defer cancel()

	var bare float64 // ns/op of the bare handler, measured first
	bareNs := func() float64 { return bare }
	b.Run("bare", func(b *testing.B) {
		serveLoop(b, okHandler, httptest.NewRequest(http.MethodGet, "/", nil))
		bare = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("wait/attached", func(b *testing.B) {
		serveLoop(b, mw, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(attachedCtx))
		reportRatio(b, bareNs())
	})
	b.Run("wait/unattached", func(b *testing.B) {
		serveLoop(b, mw, httptest.NewRequest(http.MethodGet, "/", nil))
		reportRatio(b, bareNs())
	})
	b.Run("cancel-on-drain", func(b *testing.B) {
		serveLoop(b, mw, httptest.NewRequest(http.MethodGet, "/stream", nil).WithContext(attachedCtx))
		reportRatio(b, bareNs())
	})
}

func loopbackServer(b *testing.B, h http.Handler, attach *drain.Controller) string {
	srv := &http.Server{Handler: h}
	if attach != nil {
		if err := attach.Attach(srv); err != nil {
			b.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/"
}

func loopbackLoop(b *testing.B, url string) {
	client := &http.Client{Transport: &http.Transport{}}
	defer client.Transport.(*http.Transport).CloseIdleConnections()
	b.ReportAllocs()
	for b.Loop() {
		res, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
	}
}

// BenchmarkLoopback measures a whole request over 127.0.0.1 with and
// without the middleware on an attached server.
func BenchmarkLoopback(b *testing.B) {
	bare := loopbackServer(b, okHandler, nil)
	ctrl, err := drain.New(drain.Config{})
	if err != nil {
		b.Fatal(err)
	}
	wrapped := loopbackServer(b, ctrl.Middleware(okHandler), ctrl)
	var bareCost float64
	b.Run("bare", func(b *testing.B) {
		loopbackLoop(b, bare)
		bareCost = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("middleware", func(b *testing.B) {
		loopbackLoop(b, wrapped)
		reportRatio(b, bareCost)
	})
}
