// Run with ./test.sh from the repository root, or here: go test -race ./...
//
// The tests cover what Traefik's basicAuth and digestAuth middlewares use:
// BasicAuth{Realm, Secrets}, its RequireAuth and CheckAuth, CheckSecret on
// htpasswd secrets, NewDigestAuthenticator, DigestAuth.CheckAuth with its
// "stale" answer, RequireAuth, RequireAuthStale and DigestAuthParams. They
// use only the standard library and golang.org/x/crypto (no test helper
// modules), so that this module adds no requirement to the Traefik build.

package auth

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

func md5sum(s string) string { x := md5.Sum([]byte(s)); return hex.EncodeToString(x[:]) }

// Published htpasswd lines: Traefik's own middleware tests (users test,
// test2, test3 whose password is their name) and the example of
// go-http-auth's README (john, "hello").
const (
	apr1Test  = "$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/"
	apr1Test2 = "$apr1$d9hr9HBB$4HxwgUir3HP4EsggP/QNo0"
	apr1Test3 = "$apr1$3rJbDP0q$RfzJiorTk78jQ1EcKqWso0"
	md5John   = "$1$dlPL2MqE$oQmn16q49SqdmhenQuNgs1"
	bcryptTst = "$2a$04$.8sTYfcxbSplCtoxt5TdJOgpBYkarKtZYsYfYxQ1edbYRuO1DNi0e"
	// SHA-1 of "password", base64: htpasswd -s.
	shaPassword = "{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g="
)

func TestCheckSecret(t *testing.T) {
	fresh, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	bcrypt2a := string(fresh)
	// htpasswd -B writes $2y$, other tools $2b$: the same algorithm.
	bcrypt2y := "$2y$" + strings.TrimPrefix(bcrypt2a, "$2a$")
	bcrypt2b := "$2b$" + strings.TrimPrefix(bcrypt2a, "$2a$")
	for _, tc := range []struct {
		name, password, secret string
		want                   bool
	}{
		{"apr1", "test", apr1Test, true},
		{"apr1 other user", "test2", apr1Test2, true},
		{"apr1 third user", "test3", apr1Test3, true},
		{"apr1 wrong password", "test2", apr1Test, false},
		{"apr1 empty password", "", apr1Test, false},
		{"md5-crypt", "hello", md5John, true},
		{"md5-crypt wrong password", "Hello", md5John, false},
		{"bcrypt 2a, published", "test", bcryptTst, true},
		{"bcrypt 2a, wrong password", "tset", bcryptTst, false},
		{"bcrypt 2a", "s3cret", bcrypt2a, true},
		{"bcrypt 2y", "s3cret", bcrypt2y, true},
		{"bcrypt 2b", "s3cret", bcrypt2b, true},
		{"bcrypt 2y wrong password", "s3cre", bcrypt2y, false},
		{"sha", "password", shaPassword, true},
		{"sha wrong password", "passwort", shaPassword, false},
		// Traefik rejects users given with a plain-text password ("test:test").
		{"plain text never matches", "test", "test", false},
		{"empty secret", "", "", false},
		{"apr1 without a salt terminator", "test", "$apr1$H6uskkkW", false},
		{"unknown scheme", "test", "$6$salt$hash", false},
		{"bcrypt password with the hash appended", "test" + bcryptTst, bcryptTst, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CheckSecret(tc.password, tc.secret); got != tc.want {
				t.Errorf("CheckSecret(%q, %q) = %t, want %t", tc.password, tc.secret, got, tc.want)
			}
		})
	}
}

func TestMD5Crypt(t *testing.T) {
	for _, tc := range []struct{ password, salt, magic, want string }{
		{"test", "H6uskkkW", "$apr1$", apr1Test},
		{"test2", "d9hr9HBB", "$apr1$", apr1Test2},
		{"hello", "dlPL2MqE", "$1$", md5John},
		// A salt longer than eight bytes is cut to eight.
		{"test", "H6uskkkWxyz", "$apr1$", apr1Test},
	} {
		if got := string(MD5Crypt([]byte(tc.password), []byte(tc.salt), []byte(tc.magic))); got != tc.want {
			t.Errorf("MD5Crypt(%q, %q, %q) = %q, want %q", tc.password, tc.salt, tc.magic, got, tc.want)
		}
	}
}

func TestBasicAuth(t *testing.T) {
	// As Traefik builds it: a literal with a realm and a secret provider.
	ba := &BasicAuth{Realm: "traefik", Secrets: func(user, realm string) string {
		if realm != "traefik" {
			return ""
		}
		return map[string]string{"test": apr1Test, "john": md5John}[user]
	}}
	basic := func(userPass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(userPass))
	}
	for _, tc := range []struct {
		name, authorization, want string
	}{
		{"good", basic("test:test"), "test"},
		{"other user", basic("john:hello"), "john"},
		{"lower-case scheme", "basic " + base64.StdEncoding.EncodeToString([]byte("test:test")), "test"},
		{"wrong password", basic("test:nope"), ""},
		{"unknown user", basic("bob:test"), ""},
		{"password with a colon", basic("test:te:st"), ""},
		{"no colon", basic("test"), ""},
		{"no header", "", ""},
		{"not base64", "Basic !!!", ""},
		{"other scheme", "Bearer " + base64.StdEncoding.EncodeToString([]byte("test:test")), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if tc.authorization != "" {
				r.Header.Set("Authorization", tc.authorization)
			}
			if got := ba.CheckAuth(r); got != tc.want {
				t.Errorf("CheckAuth = %q, want %q", got, tc.want)
			}
		})
	}
	if got := NewBasicAuthenticator("r", ba.Secrets); got.Realm != "r" || got.Secrets == nil {
		t.Errorf("NewBasicAuthenticator: %+v", got)
	}
}

func TestBasicRequireAuth(t *testing.T) {
	for _, tc := range []struct{ realm, want string }{
		{"traefik", `Basic realm="traefik"`},
		{`my "quoted" \ realm`, `Basic realm="my \"quoted\" \\ realm"`},
	} {
		rec := httptest.NewRecorder()
		(&BasicAuth{Realm: tc.realm}).RequireAuth(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if rec.Code != http.StatusUnauthorized || rec.Header().Get("WWW-Authenticate") != tc.want {
			t.Errorf("realm %q: %d %q, want 401 %q", tc.realm, rec.Code, rec.Header().Get("WWW-Authenticate"), tc.want)
		}
	}
}

func TestDigestAuthParams(t *testing.T) {
	for _, tc := range []struct {
		name, header string
		want         map[string]string
	}{
		{
			name:   "RFC 2617 example",
			header: `Digest username="Mufasa", realm="testrealm@host.com", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", uri="/dir/index.html", qop=auth, nc=00000001, cnonce="0a4f113b", response="6629fae49393a05397450978507c4ef1", opaque="5ccc069c403ebaf9f0171e9517f40e41"`,
			want: map[string]string{
				"username": "Mufasa", "realm": "testrealm@host.com", "nonce": "dcd98b7102dd2f0e8b11d0f600bfb0c093",
				"uri": "/dir/index.html", "qop": "auth", "nc": "00000001", "cnonce": "0a4f113b",
				"response": "6629fae49393a05397450978507c4ef1", "opaque": "5ccc069c403ebaf9f0171e9517f40e41",
			},
		},
		{
			name:   "commas and escapes inside quotes, mixed-case keys, spaces",
			header: `Digest  Username = "a, \"b\"" ,URI="/x?y=1,2",nc=2`,
			want:   map[string]string{"username": `a, "b"`, "uri": "/x?y=1,2", "nc": "2"},
		},
		{name: "lower-case scheme", header: `digest username="u"`, want: map[string]string{"username": "u"}},
		{name: "basic credentials", header: "Basic dGVzdDp0ZXN0", want: nil},
		{name: "empty", header: "", want: nil},
		{name: "scheme only", header: "Digest", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DigestAuthParams(tc.header); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("DigestAuthParams(%q)\n got %q\nwant %q", tc.header, got, tc.want)
			}
		})
	}
}

// TestDigestRFC2617 checks the response computation against the worked
// example of RFC 2617 section 3.5.
func TestDigestRFC2617(t *testing.T) {
	const realm = "testrealm@host.com"
	da := NewDigestAuthenticator(realm, func(user, r string) string {
		if user == "Mufasa" && r == realm {
			return "Circle Of Life"
		}
		return ""
	})
	da.PlainTextSecrets = true
	da.Opaque = "5ccc069c403ebaf9f0171e9517f40e41"
	da.clients["dcd98b7102dd2f0e8b11d0f600bfb0c093"] = &digestClient{}
	r := httptest.NewRequest(http.MethodGet, "/dir/index.html", nil)
	r.Header.Set("Authorization", `Digest username="Mufasa", realm="testrealm@host.com", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", uri="/dir/index.html", qop=auth, nc=00000001, cnonce="0a4f113b", response="6629fae49393a05397450978507c4ef1", opaque="5ccc069c403ebaf9f0171e9517f40e41"`)
	if user, info := da.CheckAuth(r); user != "Mufasa" || info != nil {
		t.Errorf("CheckAuth = %q, %v; want Mufasa, nil", user, info)
	}
}

// digestClientFor answers a's challenge (from RequireAuth or
// RequireAuthStale) the way a browser does.
type digestClientFor struct {
	challenge map[string]string
}

func (c digestClientFor) request(method, uri, user, password, nc string, edit func(map[string]string)) *http.Request {
	ha1 := md5sum(user + ":" + c.challenge["realm"] + ":" + password)
	p := map[string]string{
		"username": user, "realm": c.challenge["realm"], "nonce": c.challenge["nonce"], "uri": uri,
		"qop": "auth", "nc": nc, "cnonce": "0a4f113b", "opaque": c.challenge["opaque"], "algorithm": "MD5",
	}
	if edit != nil {
		edit(p)
	}
	p["response"] = md5sum(strings.Join([]string{ha1, p["nonce"], p["nc"], p["cnonce"], p["qop"], md5sum(method + ":" + p["uri"])}, ":"))
	r := httptest.NewRequest(method, uri, nil)
	r.Header.Set("Authorization", fmt.Sprintf(
		`Digest username="%s", realm="%s", nonce="%s", uri="%s", qop=%s, nc=%s, cnonce="%s", response="%s", opaque="%s", algorithm=%s`,
		p["username"], p["realm"], p["nonce"], p["uri"], p["qop"], p["nc"], p["cnonce"], p["response"], p["opaque"], p["algorithm"]))
	return r
}

func challenge(t *testing.T, require func(http.ResponseWriter, *http.Request)) (digestClientFor, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	require(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	h := rec.Header().Get("WWW-Authenticate")
	ch := DigestAuthParams(h)
	if rec.Code != http.StatusUnauthorized || ch["nonce"] == "" || ch["opaque"] == "" || ch["qop"] != "auth" || ch["algorithm"] != "MD5" {
		t.Fatalf("challenge: %d %q", rec.Code, h)
	}
	return digestClientFor{ch}, h
}

// TestDigestFlow is a whole exchange as Traefik's digestAuth middleware runs
// it, with an htdigest secret (Traefik's test user: test:traefik:test).
func TestDigestFlow(t *testing.T) {
	const ha1 = "a2688e031edb4be6a3797f3882655c05"
	if md5sum("test:traefik:test") != ha1 {
		t.Fatal("htdigest line of the test user")
	}
	secrets := func(user, realm string) string {
		if user == "test" && realm == "traefik" {
			return ha1
		}
		return ""
	}
	da := NewDigestAuthenticator("traefik", secrets)
	c, _ := challenge(t, da.RequireAuth)
	if c.challenge["realm"] != "traefik" || c.challenge["opaque"] != da.Opaque {
		t.Fatalf("challenge %v", c.challenge)
	}
	stale := "stale"
	for _, step := range []struct {
		name     string
		req      *http.Request
		wantUser string
		wantInfo *string
	}{
		{"first request", c.request("GET", "/x?y=1", "test", "test", "00000001", nil), "test", nil},
		{"replayed nonce count", c.request("GET", "/x?y=1", "test", "test", "00000001", nil), "", nil},
		{"next nonce count", c.request("GET", "/x?y=1", "test", "test", "00000002", nil), "test", nil},
		{"skipped nonce counts", c.request("POST", "/other", "test", "test", "0000000a", nil), "test", nil},
		{"earlier nonce count", c.request("GET", "/x?y=1", "test", "test", "00000005", nil), "", nil},
		{"wrong password", c.request("GET", "/x?y=1", "test", "nope", "0000000b", nil), "", nil},
		{"unknown user", c.request("GET", "/x?y=1", "bob", "test", "0000000c", nil), "", nil},
		{"uri of another resource", c.request("GET", "/x?y=1", "test", "test", "0000000d",
			func(p map[string]string) { p["uri"] = "/admin" }), "", nil},
		{"wrong opaque", c.request("GET", "/x?y=1", "test", "test", "0000000e",
			func(p map[string]string) { p["opaque"] = "0000" }), "", nil},
		{"other realm", c.request("GET", "/x?y=1", "test", "test", "0000000f",
			func(p map[string]string) { p["realm"] = "elsewhere" }), "", nil},
		{"qop auth-int", c.request("GET", "/x?y=1", "test", "test", "00000010",
			func(p map[string]string) { p["qop"] = "auth-int" }), "", nil},
		{"algorithm SHA-256", c.request("GET", "/x?y=1", "test", "test", "00000011",
			func(p map[string]string) { p["algorithm"] = "SHA-256" }), "", nil},
		{"nonce never issued, right credentials: stale", c.request("GET", "/x?y=1", "test", "test", "00000001",
			func(p map[string]string) { p["nonce"] = "0123456789abcdef" }), "", &stale},
		{"nonce never issued, wrong password: not stale", c.request("GET", "/x?y=1", "test", "nope", "00000001",
			func(p map[string]string) { p["nonce"] = "0123456789abcdef" }), "", nil},
		{"still good", c.request("GET", "/x?y=1", "test", "test", "00000012", nil), "test", nil},
	} {
		user, info := da.CheckAuth(step.req)
		if user != step.wantUser || !reflect.DeepEqual(info, step.wantInfo) {
			t.Errorf("%s: CheckAuth = %q, %v; want %q, %v", step.name, user, deref(info), step.wantUser, deref(step.wantInfo))
		}
	}

	// A second authenticator (a restarted Traefik) knows none of the first's
	// nonces: the client is told its nonce is stale, and a stale challenge
	// gives it a fresh one.
	da2 := NewDigestAuthenticator("traefik", secrets)
	da2.Opaque = da.Opaque
	if user, info := da2.CheckAuth(c.request("GET", "/x?y=1", "test", "test", "00000013", nil)); user != "" || deref(info) != "stale" {
		t.Errorf("unknown nonce: CheckAuth = %q, %v; want \"\", stale", user, deref(info))
	}
	c2, h := challenge(t, da2.RequireAuthStale)
	if !strings.HasSuffix(h, ", stale=true") || c2.challenge["nonce"] == c.challenge["nonce"] {
		t.Errorf("stale challenge %q", h)
	}
	if user, _ := da2.CheckAuth(c2.request("GET", "/x?y=1", "test", "test", "00000001", nil)); user != "test" {
		t.Errorf("after the stale challenge: CheckAuth = %q", user)
	}
	if _, h := challenge(t, da2.RequireAuth); strings.Contains(h, "stale") {
		t.Errorf("RequireAuth challenge says stale: %q", h)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

func TestDigestOptions(t *testing.T) {
	t.Run("plain-text secrets", func(t *testing.T) {
		da := NewDigestAuthenticator("r", func(user, _ string) string { return map[string]string{"u": "pw"}[user] })
		da.PlainTextSecrets = true
		c, _ := challenge(t, da.RequireAuth)
		if user, _ := da.CheckAuth(c.request("GET", "/", "u", "pw", "00000001", nil)); user != "u" {
			t.Errorf("CheckAuth = %q", user)
		}
	})
	t.Run("ignore nonce count", func(t *testing.T) {
		da := NewDigestAuthenticator("r", func(user, realm string) string { return md5sum(user + ":" + realm + ":pw") })
		da.IgnoreNonceCount = true
		c, _ := challenge(t, da.RequireAuth)
		for i := 0; i < 2; i++ {
			if user, _ := da.CheckAuth(c.request("GET", "/", "u", "pw", "00000001", nil)); user != "u" {
				t.Errorf("request %d: CheckAuth = %q", i, user)
			}
		}
	})
	t.Run("the nonce cache is bounded", func(t *testing.T) {
		da := NewDigestAuthenticator("r", func(string, string) string { return "" })
		da.ClientCacheSize, da.ClientCacheTolerance = 10, 3
		first, _ := challenge(t, da.RequireAuth)
		for i := 0; i < 50; i++ {
			challenge(t, da.RequireAuth)
			if n := len(da.clients); n > da.ClientCacheSize {
				t.Fatalf("%d nonces kept, want at most %d", n, da.ClientCacheSize)
			}
		}
		if _, ok := da.clients[first.challenge["nonce"]]; ok {
			t.Errorf("the oldest nonce was not forgotten")
		}
	})
	t.Run("a literal without a cache map", func(t *testing.T) {
		da := &DigestAuth{Realm: "r", Opaque: "o", Secrets: func(user, realm string) string { return md5sum(user + ":" + realm + ":pw") }}
		c, _ := challenge(t, da.RequireAuth)
		if user, _ := da.CheckAuth(c.request("GET", "/", "u", "pw", "00000001", nil)); user != "u" {
			t.Errorf("CheckAuth = %q", user)
		}
	})
}

// TestDigestConcurrent: Traefik serves many requests at once through one
// authenticator.
func TestDigestConcurrent(t *testing.T) {
	da := NewDigestAuthenticator("r", func(user, realm string) string { return md5sum(user + ":" + realm + ":pw") })
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= 20; i++ {
				rec := httptest.NewRecorder()
				da.RequireAuth(rec, httptest.NewRequest(http.MethodGet, "/", nil))
				c := digestClientFor{DigestAuthParams(rec.Header().Get("WWW-Authenticate"))}
				if user, _ := da.CheckAuth(c.request("GET", "/", "u", "pw", fmt.Sprintf("%08x", i), nil)); user != "u" {
					t.Errorf("CheckAuth = %q", user)
					return
				}
			}
		}()
	}
	wg.Wait()
}
