package traefik_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// user is one simulated browser: its own cookie jar (net/http/cookiejar:
// Max-Age, Path and host-only rules as a browser applies them) and the
// request headers it always sends.
type user struct {
	id     int
	hc     *http.Client
	jar    http.CookieJar
	header http.Header
}

// answer is what a user saw of one response.
type answer struct {
	backend string // headerBackend: who answered
	path    string // headerPath: the path the backend received
	cookies []*http.Cookie
	// When the request was sent and its answer read.
	start, end time.Time
}

// population is a set of users sharing one connection pool to Traefik.
// Safe for concurrent use; a user sends one request at a time.
type population struct {
	users   []*user
	workers int
	tr      *http.Transport
}

// newPopulation makes n users whose rounds run on the given number of
// concurrent connections.
func newPopulation(t testing.TB, n, workers int) *population {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	p := &population{workers: workers, tr: tr}
	for i := 0; i < n; i++ {
		jar, err := cookiejar.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		p.users = append(p.users, &user{id: i, jar: jar, header: http.Header{},
			hc: &http.Client{Transport: tr, Jar: jar, Timeout: 10 * time.Second}})
	}
	return p
}

// setCookie puts a cookie in u's jar for base, as if a server had set it.
func (u *user) setCookie(base string, c *http.Cookie) error {
	pu, err := url.Parse(base)
	if err != nil {
		return err
	}
	u.jar.SetCookies(pu, []*http.Cookie{c})
	return nil
}

// cookie returns the value of u's cookie name for base, "" when none.
func (u *user) cookie(base, name string) string {
	pu, err := url.Parse(base)
	if err != nil {
		return ""
	}
	for _, c := range u.jar.Cookies(pu) {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

// do sends one GET of base+path for u. A response other than 200 with the
// answering backend's name as body and in headerBackend is an error.
func (u *user) do(ctx context.Context, base, path string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return answer{}, err
	}
	for k, vs := range u.header {
		req.Header[k] = append([]string(nil), vs...)
	}
	start := time.Now()
	resp, err := u.hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return answer{}, err
	}
	a := answer{backend: resp.Header.Get(headerBackend), path: resp.Header.Get(headerPath), cookies: resp.Cookies(),
		start: start, end: time.Now()}
	if resp.StatusCode != http.StatusOK {
		return a, fmt.Errorf("user %d: status %d: %q", u.id, resp.StatusCode, body)
	}
	if a.backend == "" || string(body) != a.backend {
		return a, fmt.Errorf("user %d: answered by %q with body %q", u.id, a.backend, body)
	}
	return a, nil
}

// roundStats counts the requests of rounds and keeps the first errors.
type roundStats struct {
	requests, failed atomic.Int64
	mu               sync.Mutex
	errs             []string
}

func (s *roundStats) fail(err error) {
	s.failed.Add(1)
	s.mu.Lock()
	if len(s.errs) < 10 {
		s.errs = append(s.errs, time.Now().Format("15:04:05.000")+" "+err.Error())
	}
	s.mu.Unlock()
}

// report fails t when a request failed.
func (s *roundStats) report(t testing.TB) {
	t.Helper()
	if f := s.failed.Load(); f > 0 {
		t.Errorf("%d of %d requests failed; first: %v", f, s.requests.Load(), s.errs)
	}
}

// round has each of us send one request to base+path, on p.workers
// connections at once, and calls seen (concurrently, never twice at once
// for one user) with each successful answer; failures are counted in
// stats.
func (p *population) round(ctx context.Context, stats *roundStats, base, path string, us []*user, seen func(u *user, a answer)) {
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for w := 0; w < p.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(us) || ctx.Err() != nil {
					return
				}
				u := us[i]
				a, err := u.do(ctx, base, path)
				stats.requests.Add(1)
				if err != nil {
					stats.fail(err)
					continue
				}
				if seen != nil {
					seen(u, a)
				}
			}
		}()
	}
	wg.Wait()
}

// hasCookie reports whether cs sets the cookie name.
func hasCookie(cs []*http.Cookie, name string) *http.Cookie {
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	return nil
}
