// Package auth is a local stand-in for github.com/abbot/go-http-auth (as forked by
// containous), written for upshift's Traefik build: HTTP Basic and Digest (RFC 7616, MD5,
// qop=auth) authentication with htpasswd/htdigest secrets. It follows go-http-auth's API
// (see NOTICE) and is tested with `go test ./...` in this directory, which ./test.sh runs.
package auth

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base64"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// SecretProvider returns the stored secret of user in realm, or "" when there is none.
type SecretProvider func(user, realm string) string

// CheckSecret reports whether password matches an htpasswd secret: bcrypt ($2a$, $2b$,
// $2x$, $2y$), MD5-crypt ($apr1$, $1$) or SHA-1 ({SHA}). Any other form never matches.
func CheckSecret(password, secret string) bool {
	switch {
	case strings.HasPrefix(secret, "$2a$"), strings.HasPrefix(secret, "$2b$"),
		strings.HasPrefix(secret, "$2x$"), strings.HasPrefix(secret, "$2y$"):
		return bcrypt.CompareHashAndPassword([]byte(secret), []byte(password)) == nil
	case strings.HasPrefix(secret, "{SHA}"):
		sum := sha1.Sum([]byte(password))
		want := "{SHA}" + base64.StdEncoding.EncodeToString(sum[:])
		return subtle.ConstantTimeCompare([]byte(secret), []byte(want)) == 1
	case strings.HasPrefix(secret, "$apr1$"):
		return checkMD5Crypt(password, secret, "$apr1$")
	case strings.HasPrefix(secret, "$1$"):
		return checkMD5Crypt(password, secret, "$1$")
	}
	return false
}

func checkMD5Crypt(password, secret, magic string) bool {
	rest := secret[len(magic):]
	i := strings.IndexByte(rest, '$')
	if i < 0 {
		return false
	}
	salt := rest[:i]
	got := MD5Crypt([]byte(password), []byte(salt), []byte(magic))
	return subtle.ConstantTimeCompare(got, []byte(secret)) == 1
}

const itoa64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// MD5Crypt returns the MD5-crypt hash of password (magic "$1$" or "$apr1$"; salt up to 8 bytes)
// in its textual form magic+salt+"$"+hash.
func MD5Crypt(password, salt, magic []byte) []byte {
	if len(salt) > 8 {
		salt = salt[:8]
	}
	d := md5.New()
	d.Write(password)
	d.Write(magic)
	d.Write(salt)

	d2 := md5.New()
	d2.Write(password)
	d2.Write(salt)
	d2.Write(password)
	mixin := d2.Sum(nil)
	for n := len(password); n > 0; n -= 16 {
		d.Write(mixin[:min(16, n)])
	}
	for n := len(password); n != 0; n >>= 1 {
		if n&1 != 0 {
			d.Write([]byte{0})
		} else {
			d.Write(password[:1])
		}
	}
	final := d.Sum(nil)

	for i := 0; i < 1000; i++ {
		h := md5.New()
		if i&1 != 0 {
			h.Write(password)
		} else {
			h.Write(final)
		}
		if i%3 != 0 {
			h.Write(salt)
		}
		if i%7 != 0 {
			h.Write(password)
		}
		if i&1 != 0 {
			h.Write(final)
		} else {
			h.Write(password)
		}
		final = h.Sum(nil)
	}

	out := make([]byte, 0, len(magic)+len(salt)+1+22)
	out = append(out, magic...)
	out = append(out, salt...)
	out = append(out, '$')
	enc := func(v uint32, n int) {
		for ; n > 0; n-- {
			out = append(out, itoa64[v&0x3f])
			v >>= 6
		}
	}
	for _, g := range [][3]int{{0, 6, 12}, {1, 7, 13}, {2, 8, 14}, {3, 9, 15}, {4, 10, 5}} {
		enc(uint32(final[g[0]])<<16|uint32(final[g[1]])<<8|uint32(final[g[2]]), 4)
	}
	enc(uint32(final[11]), 2)
	return out
}
