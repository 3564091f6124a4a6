// Run with: cd hack/traefik/go-http-auth && GOWORK=off GOFLAGS=-mod=mod go test .

package auth

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

func h(s string) string { x := md5.Sum([]byte(s)); return hex.EncodeToString(x[:]) }

func TestDigestRoundTrip(t *testing.T) {
	ha1 := h("bob:realm:pw")
	da := NewDigestAuthenticator("realm", func(u, r string) string {
		if u == "bob" && r == "realm" {
			return ha1
		}
		return ""
	})
	rec := httptest.NewRecorder()
	da.RequireAuth(rec, httptest.NewRequest("GET", "/x?y=1", nil))
	ch := DigestAuthParams(rec.Header().Get("WWW-Authenticate"))
	if rec.Code != 401 || ch["nonce"] == "" || ch["opaque"] == "" || ch["qop"] != "auth" {
		t.Fatalf("challenge %v %v", rec.Code, ch)
	}
	mk := func(nc, pw string) *http.Request {
		r := httptest.NewRequest("GET", "/x?y=1", nil)
		resp := h(fmt.Sprintf("%s:%s:%s:%s:%s:%s", h("bob:realm:"+pw), ch["nonce"], nc, "cn", "auth", h("GET:/x?y=1")))
		r.Header.Set("Authorization", fmt.Sprintf(`Digest username="bob", realm="realm", nonce="%s", uri="/x?y=1", qop=auth, nc=%s, cnonce="cn", response="%s", opaque="%s", algorithm=MD5`, ch["nonce"], nc, resp, ch["opaque"]))
		return r
	}
	if u, _ := da.CheckAuth(mk("00000001", "pw")); u != "bob" {
		t.Fatalf("good creds: %q", u)
	}
	if u, _ := da.CheckAuth(mk("00000001", "pw")); u != "" {
		t.Fatal("replayed nc accepted")
	}
	if u, _ := da.CheckAuth(mk("00000002", "pw")); u != "bob" {
		t.Fatal("next nc rejected")
	}
	if u, _ := da.CheckAuth(mk("00000003", "bad")); u != "" {
		t.Fatal("bad password accepted")
	}
	da2 := NewDigestAuthenticator("realm", da.Secrets)
	da2.Opaque = da.Opaque
	if u, info := da2.CheckAuth(mk("00000004", "pw")); u != "" || info == nil || *info != "stale" {
		t.Fatalf("unknown nonce: %q %v", u, info)
	}
	ba := NewBasicAuthenticator("r", func(u, _ string) string { return "$apr1$abcdefgh$h9FWgUz3n9YxylKLlR5SQ/" })
	r := httptest.NewRequest("GET", "/", nil)
	r.SetBasicAuth("u", "secret")
	if ba.CheckAuth(r) != "u" {
		t.Fatal("basic apr1")
	}
	r.SetBasicAuth("u", "nope")
	if ba.CheckAuth(r) != "" {
		t.Fatal("basic bad")
	}
}
