package auth

import (
	"encoding/base64"
	"net/http"
	"strings"
)

// BasicAuth authenticates with HTTP Basic authentication (RFC 7617).
type BasicAuth struct {
	Realm   string
	Secrets SecretProvider
}

// NewBasicAuthenticator returns a BasicAuth for realm.
func NewBasicAuthenticator(realm string, secrets SecretProvider) *BasicAuth {
	return &BasicAuth{Realm: realm, Secrets: secrets}
}

// CheckAuth returns the authenticated user name, or "" when r does not authenticate.
func (a *BasicAuth) CheckAuth(r *http.Request) string {
	s := strings.SplitN(r.Header.Get("Authorization"), " ", 2)
	if len(s) != 2 || !strings.EqualFold(s[0], "Basic") {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s[1]))
	if err != nil {
		return ""
	}
	user, password, ok := strings.Cut(string(b), ":")
	if !ok {
		return ""
	}
	secret := a.Secrets(user, a.Realm)
	if secret == "" || !CheckSecret(password, secret) {
		return ""
	}
	return user
}

// RequireAuth answers 401 with a Basic challenge for the realm.
func (a *BasicAuth) RequireAuth(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Basic realm="`+quoteEscape(a.Realm)+`"`)
	http.Error(w, http.StatusText(http.StatusUnauthorized), http.StatusUnauthorized)
}

func quoteEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
}
