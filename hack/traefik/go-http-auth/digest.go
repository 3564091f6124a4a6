package auth

import (
	"crypto/md5"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

type digestClient struct {
	nc       uint64 // highest nonce count seen
	lastSeen int64  // unix nanoseconds
}

// DigestAuth authenticates with HTTP Digest authentication (RFC 7616: MD5, qop=auth).
// Secrets return the htdigest HA1 (hex MD5 of "user:realm:password"), or the password itself
// when PlainTextSecrets is set. Safe for concurrent use.
type DigestAuth struct {
	Realm            string
	Opaque           string
	Secrets          SecretProvider
	PlainTextSecrets bool
	IgnoreNonceCount bool

	// ClientCacheSize bounds the number of outstanding nonces; when exceeded, the least
	// recently used ClientCacheTolerance nonces are forgotten.
	ClientCacheSize      int
	ClientCacheTolerance int

	mu      sync.Mutex
	clients map[string]*digestClient
}

// NewDigestAuthenticator returns a DigestAuth for realm with a random opaque value.
func NewDigestAuthenticator(realm string, secrets SecretProvider) *DigestAuth {
	return &DigestAuth{
		Realm:                realm,
		Opaque:               randomKey(),
		Secrets:              secrets,
		ClientCacheSize:      1000,
		ClientCacheTolerance: 100,
		clients:              map[string]*digestClient{},
	}
}

func randomKey() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func md5hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// DigestAuthParams parses the parameters of a Digest Authorization header value; nil when the
// value is not a Digest credential.
func DigestAuthParams(authorization string) map[string]string {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Digest") {
		return nil
	}
	return parsePairs(rest)
}

// parsePairs parses a comma-separated list of key=value or key="quoted value" pairs.
func parsePairs(s string) map[string]string {
	m := map[string]string{}
	for {
		s = strings.TrimLeft(s, " \t,")
		if s == "" {
			return m
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return m
		}
		key := strings.ToLower(strings.TrimSpace(s[:eq]))
		s = strings.TrimLeft(s[eq+1:], " \t")
		var val string
		if strings.HasPrefix(s, `"`) {
			var b strings.Builder
			i := 1
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				b.WriteByte(s[i])
			}
			val = b.String()
			if i < len(s) {
				i++
			}
			s = s[i:]
		} else {
			end := strings.IndexByte(s, ',')
			if end < 0 {
				end = len(s)
			}
			val = strings.TrimSpace(s[:end])
			s = s[end:]
		}
		m[key] = val
	}
}

// CheckAuth returns the authenticated user name, or "" and, when the credentials were right
// but the nonce is unknown or expired, a pointer to "stale".
func (da *DigestAuth) CheckAuth(r *http.Request) (username string, authinfo *string) {
	auth := DigestAuthParams(r.Header.Get("Authorization"))
	if auth == nil || auth["username"] == "" || auth["nonce"] == "" || auth["response"] == "" {
		return "", nil
	}
	if subtle.ConstantTimeCompare([]byte(auth["opaque"]), []byte(da.Opaque)) != 1 {
		return "", nil
	}
	if alg := auth["algorithm"]; alg != "" && !strings.EqualFold(alg, "MD5") {
		return "", nil
	}
	if auth["qop"] != "auth" || auth["cnonce"] == "" || auth["realm"] != da.Realm {
		return "", nil
	}
	// The uri must name the requested resource.
	if auth["uri"] != r.RequestURI {
		u, err := url.ParseRequestURI(auth["uri"])
		if err != nil || r.URL == nil || u.Path != r.URL.Path || u.RawQuery != r.URL.RawQuery {
			return "", nil
		}
	}
	nc, err := strconv.ParseUint(auth["nc"], 16, 64)
	if err != nil {
		return "", nil
	}

	secret := da.Secrets(auth["username"], da.Realm)
	if secret == "" {
		return "", nil
	}
	ha1 := secret
	if da.PlainTextSecrets {
		ha1 = md5hex(auth["username"] + ":" + da.Realm + ":" + secret)
	}
	ha2 := md5hex(r.Method + ":" + auth["uri"])
	want := md5hex(strings.Join([]string{ha1, auth["nonce"], auth["nc"], auth["cnonce"], auth["qop"], ha2}, ":"))
	if subtle.ConstantTimeCompare([]byte(want), []byte(strings.ToLower(auth["response"]))) != 1 {
		return "", nil
	}

	da.mu.Lock()
	defer da.mu.Unlock()
	client, ok := da.clients[auth["nonce"]]
	if !ok {
		stale := "stale"
		return "", &stale
	}
	if !da.IgnoreNonceCount && client.nc != 0 && nc <= client.nc {
		return "", nil
	}
	client.nc = nc
	client.lastSeen = time.Now().UnixNano()
	return auth["username"], nil
}

// RequireAuth answers 401 with a fresh Digest challenge.
func (da *DigestAuth) RequireAuth(w http.ResponseWriter, r *http.Request) {
	da.requireAuth(w, false)
}

// RequireAuthStale answers 401 with a fresh Digest challenge marked stale=true, telling the
// client to retry with the new nonce without asking the user again.
func (da *DigestAuth) RequireAuthStale(w http.ResponseWriter, r *http.Request) {
	da.requireAuth(w, true)
}

func (da *DigestAuth) requireAuth(w http.ResponseWriter, stale bool) {
	nonce := randomKey()
	da.mu.Lock()
	if da.clients == nil {
		da.clients = map[string]*digestClient{}
	}
	if da.ClientCacheSize > 0 && len(da.clients) >= da.ClientCacheSize {
		da.purge(max(da.ClientCacheTolerance, len(da.clients)-da.ClientCacheSize+1))
	}
	da.clients[nonce] = &digestClient{lastSeen: time.Now().UnixNano()}
	da.mu.Unlock()

	challenge := fmt.Sprintf(`Digest realm="%s", nonce="%s", opaque="%s", algorithm=MD5, qop="auth"`,
		quoteEscape(da.Realm), nonce, da.Opaque)
	if stale {
		challenge += ", stale=true"
	}
	w.Header().Set("WWW-Authenticate", challenge)
	http.Error(w, http.StatusText(http.StatusUnauthorized), http.StatusUnauthorized)
}

// purge forgets the n least recently seen nonces. Callers hold da.mu.
func (da *DigestAuth) purge(n int) {
	type entry struct {
		nonce    string
		lastSeen int64
	}
	entries := make([]entry, 0, len(da.clients))
	for k, v := range da.clients {
		entries = append(entries, entry{k, v.lastSeen})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].lastSeen < entries[j].lastSeen })
	for i := 0; i < n && i < len(entries); i++ {
		delete(da.clients, entries[i].nonce)
	}
}
