package retry_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/upshift-dev/upshift/serve/retry"
)

func benchLoop(b *testing.B, rt http.RoundTripper, newReq func() *http.Request) {
	b.ReportAllocs()
	for b.Loop() {
		res, err := rt.RoundTrip(newReq())
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
	}
}

func reportRatio(b *testing.B, base float64) {
	if base > 0 && b.N > 0 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/base, "x-default")
	}
}

// BenchmarkRoundTrip compares the retry transport with a plain
// http.Transport (configured like http.DefaultTransport) on loopback,
// for a request that succeeds at once.
func BenchmarkRoundTrip(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	get := func() *http.Request { r, _ := http.NewRequest(http.MethodGet, srv.URL, nil); return r }
	post := func() *http.Request {
		r, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader([]byte(`{"n":1}`)))
		return r
	}
	for _, c := range []struct {
		name   string
		newReq func() *http.Request
	}{{"GET", get}, {"POST", post}} {
		var defaultCost float64
		b.Run(c.name+"/default", func(b *testing.B) {
			base := http.DefaultTransport.(*http.Transport).Clone()
			defer base.CloseIdleConnections()
			benchLoop(b, base, c.newReq)
			defaultCost = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		})
		b.Run(c.name+"/retry", func(b *testing.B) {
			base := http.DefaultTransport.(*http.Transport).Clone()
			defer base.CloseIdleConnections()
			benchLoop(b, &retry.Transport{Base: base, Budget: &retry.Budget{}}, c.newReq)
			reportRatio(b, defaultCost)
		})
	}
}

type staticRT struct{}

func (staticRT) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(""))}, nil
}

// BenchmarkOverhead isolates the wrapper: the base answers at once
// without I/O, so what remains is the retry transport's own cost.
func BenchmarkOverhead(b *testing.B) {
	get, _ := http.NewRequest(http.MethodGet, "http://backend.test/", nil)
	post, _ := http.NewRequest(http.MethodPost, "http://backend.test/", nil)
	rt := &retry.Transport{Base: staticRT{}, Budget: &retry.Budget{}}
	b.Run("GET/base", func(b *testing.B) { benchLoop(b, staticRT{}, func() *http.Request { return get }) })
	b.Run("GET/retry", func(b *testing.B) { benchLoop(b, rt, func() *http.Request { return get }) })
	b.Run("POST/retry", func(b *testing.B) { benchLoop(b, rt, func() *http.Request { return post }) })
}
