package ray_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
)

// headerLog records the credential headers of every request before
// passing it on.
type headerLog struct {
	next http.Handler
	mu   sync.Mutex
	seen []string
}

func (h *headerLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.seen = append(h.seen, "Authorization="+r.Header.Get("Authorization")+" X-Ray-Authorization="+r.Header.Get("X-Ray-Authorization"))
	h.mu.Unlock()
	h.next.ServeHTTP(w, r)
}

func (h *headerLog) requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen...)
}

// apiServerProxy stands for the Kubernetes API server's service proxy: it
// authenticates the caller with "Authorization: Bearer k8s", removes that
// header and forwards the request.
func apiServerProxy(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k8s" {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		r.Header.Del("Authorization")
		next.ServeHTTP(w, r)
	})
}

// k8sCredentials adds the caller's Kubernetes credential unless the
// request has an Authorization header already, as client-go's bearer
// token transport does.
type k8sCredentials struct{ next http.RoundTripper }

func (t k8sCredentials) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer k8s")
	}
	return t.next.RoundTrip(r)
}

func TestTokenHeader(t *testing.T) {
	const (
		viaAuth    = "Authorization=Bearer s3cret X-Ray-Authorization="
		viaRayAuth = "Authorization= X-Ray-Authorization=Bearer s3cret"
		none       = "Authorization= X-Ray-Authorization="
	)
	cases := []struct {
		name        string
		token       string
		header      string
		rayReads    []string // RequireToken's headers; nil: Ray's two
		behindProxy bool
		wantSent    string // at the dashboard
		wantStatus  int    // 0: success
	}{
		{"default: Authorization", "s3cret", "", nil, false, viaAuth, 0},
		{"Authorization named", "s3cret", ray.HeaderAuthorization, nil, false, viaAuth, 0},
		{"X-Ray-Authorization", "s3cret", ray.HeaderRayAuthorization, nil, false, viaRayAuth, 0},
		{"any case", "s3cret", "x-ray-authorization", []string{"X-Ray-Authorization"}, false, viaRayAuth, 0},
		{"only the header named is sent", "s3cret", ray.HeaderAuthorization, []string{"X-Ray-Authorization"}, false, viaAuth, http.StatusUnauthorized},
		{"no token, no header", "", ray.HeaderRayAuthorization, nil, false, none, 0},
		{"through the API server's proxy: X-Ray-Authorization", "s3cret", ray.HeaderRayAuthorization, nil, true, viaRayAuth, 0},
		{"through the API server's proxy: Authorization is the API server's", "s3cret", "", nil, true, "", http.StatusUnauthorized},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rs := raytest.New(raytest.Options{})
			if tc.token != "" {
				rs.RequireToken(tc.token, tc.rayReads...)
			}
			log := &headerLog{next: rs}
			var h http.Handler = log
			if tc.behindProxy {
				h = apiServerProxy(log)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			r := adapter(t, srv.URL, llmConfig, func(c *ray.Config) {
				c.Token, c.TokenHeader = tc.token, tc.header
				if tc.behindProxy {
					c.HTTPClient = &http.Client{Transport: k8sCredentials{http.DefaultTransport}}
				}
			})
			err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 40})
			if tc.wantStatus == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := r.Capacity(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				var herr *ray.HTTPError
				if !errors.As(err, &herr) || herr.StatusCode != tc.wantStatus || !rollout.IsPermanent(err) {
					t.Fatalf("got %v, want a permanent %d", err, tc.wantStatus)
				}
			}
			if tc.wantSent != "" && len(log.requests()) == 0 {
				t.Fatal("no request reached the dashboard")
			}
			var want []string
			for range log.requests() {
				want = append(want, tc.wantSent)
			}
			if tc.wantSent == "" {
				want = nil // refused before the dashboard
			}
			if diff := cmp.Diff(want, log.requests()); diff != "" {
				t.Errorf("credentials at the dashboard (-want +got):\n%s", diff)
			}
		})
	}
}

// redirecting answers a request under /moved/ with a redirect to where(r)
// when its method is one of methods, and serves the others, and everything
// else, with next (without the /moved prefix).
func redirecting(code int, methods string, where func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/moved/") && strings.Contains(methods, r.Method) {
			http.Redirect(w, r, where(r), code)
			return
		}
		r.URL.Path = strings.TrimPrefix(r.URL.Path, "/moved")
		next.ServeHTTP(w, r)
	})
}

func TestRedirects(t *testing.T) {
	type result struct {
		Err        string // "": success; "redirect": a *RedirectError; else a part of the error
		Permanent  bool
		Status     int    // of a refused redirect
		Location   string // of a refused redirect, with the servers' URLs as OTHER and SELF
		Reason     string // a part of the refusal's reason
		OtherHits  int    // requests that reached the other server
		ClientHook int    // calls to the caller's CheckRedirect
	}
	cases := []struct {
		name    string
		code    int
		methods string
		to      string // OTHER (another port), SELF (the dashboard's origin), or a URL with those
		call    string // "get" (Capacity) or "set" (SetCapacity: GET then PUT)
		hook    bool   // the caller's HTTPClient has a CheckRedirect
		want    result
	}{
		{"another port refused", http.StatusTemporaryRedirect, "GET", "OTHER", "get", false,
			result{Err: "redirect", Permanent: true, Status: 307, Location: "OTHER" + "/api/serve/applications/" + "?api_type=declarative", Reason: "leaves SELF"}},
		{"a PUT to another port refused, body and token kept", http.StatusPermanentRedirect, "PUT", "OTHER", "set", false,
			result{Err: "redirect", Permanent: true, Status: 308, Location: "OTHER" + "/api/serve/applications/", Reason: "leaves SELF"}},
		{"https on the same host and port refused", http.StatusFound, "GET", "https://SELFHOST", "get", false,
			result{Err: "redirect", Permanent: true, Status: 302, Location: "https://SELFHOST" + "/api/serve/applications/" + "?api_type=declarative", Reason: "leaves SELF"}},
		{"same origin followed with the token", http.StatusFound, "GET", "SELF", "get", false,
			result{}},
		{"a PUT kept a PUT in the same origin followed", http.StatusTemporaryRedirect, "PUT", "SELF", "set", false,
			result{}},
		{"a PUT turned into a GET refused", http.StatusFound, "PUT", "SELF", "set", false,
			result{Err: "redirect", Permanent: true, Status: 302, Location: "SELF" + "/api/serve/applications/", Reason: "turn the PUT into a GET"}},
		{"the caller's CheckRedirect runs for what is followed", http.StatusFound, "GET", "SELF", "get", true,
			result{ClientHook: 1}},
		{"the caller's CheckRedirect does not run for what is refused", http.StatusFound, "GET", "OTHER", "get", true,
			result{Err: "redirect", Permanent: true, Status: 302, Location: "OTHER" + "/api/serve/applications/" + "?api_type=declarative", Reason: "leaves SELF"}},
		{"a loop in the same origin stops", http.StatusFound, "GET", "SELF/moved", "get", false,
			result{Err: "stopped after 10 redirects"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var mu sync.Mutex
			var got result
			other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				got.OtherHits++
				mu.Unlock()
			}))
			defer other.Close()
			rs := raytest.New(raytest.Options{})
			rs.RequireToken("s3cret")
			var self string
			srv := httptest.NewServer(redirecting(tc.code, tc.methods, func(r *http.Request) string {
				to := strings.NewReplacer("OTHER", other.URL, "SELFHOST", strings.TrimPrefix(self, "http://"), "SELF", self).Replace(tc.to)
				return to + strings.TrimPrefix(r.URL.RequestURI(), "/moved")
			}, rs))
			defer srv.Close()
			self = srv.URL
			r := adapter(t, srv.URL+"/moved", llmConfig, func(c *ray.Config) {
				c.Token = "s3cret"
				if tc.hook {
					c.HTTPClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
						mu.Lock()
						got.ClientHook++
						mu.Unlock()
						return nil
					}}
				}
			})
			var err error
			if tc.call == "get" {
				_, err = r.Capacity(ctx)
			} else {
				err = r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 40})
			}
			var rerr *ray.RedirectError
			switch {
			case err == nil:
			case errors.As(err, &rerr):
				got.Err, got.Status, got.Reason = "redirect", rerr.StatusCode, rerr.Reason
				got.Location = strings.NewReplacer(other.URL, "OTHER", srv.URL, "SELF", strings.TrimPrefix(srv.URL, "http://"), "SELFHOST").Replace(rerr.Location)
				got.Reason = strings.ReplaceAll(got.Reason, srv.URL, "SELF")
				if !strings.Contains(err.Error(), rerr.Location) {
					t.Errorf("%q does not name the redirect's target", err)
				}
			default:
				got.Err = err.Error()
			}
			got.Permanent = rollout.IsPermanent(err)
			want := tc.want
			if want.Err != "" && want.Err != "redirect" && strings.Contains(got.Err, want.Err) {
				got.Err = want.Err
			}
			if want.Reason != "" && strings.Contains(got.Reason, want.Reason) {
				got.Reason = want.Reason
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if tc.want.Err == "" && tc.call == "set" && rs.Puts() != 1 {
				t.Errorf("%d PUTs reached the dashboard, want 1", rs.Puts())
			}
		})
	}
}
