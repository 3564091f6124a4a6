package replicas

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// digestLen is the number of hexadecimal digits of an identity's digest.
const digestLen = 8

// Identity returns the identity of revision as tmpl renders it: revision,
// "@", and the first 8 hexadecimal digits of the SHA-256 of tmpl's JSON
// encoding, e.g. "v2@3f2a1c9b". tmpl is what the revision means: the pod
// template (or the part of it) that a TemplateFunc makes for revision,
// say the container and its image.
//
// Give the Runner identities instead of bare revision names when what a
// revision means can change under its name (an operator whose spec holds
// an image template next to the revision): a change of the template is
// then a new identity, which the strategy handles as any new revision (a
// Retarget: the abandoned canary walked back, the new identity deployed at
// zero), where a bare name would leave the same revision with a template
// that no side runs. The TemplateFunc must then map each identity to the
// template it was made from, the old ones included, for as long as a side
// may run them (see the example operator, which keeps them in its
// status). Identity is deterministic, and safe for concurrent use.
func Identity(revision string, tmpl corev1.PodTemplateSpec) string {
	b, err := json.Marshal(&tmpl)
	if err != nil { // a PodTemplateSpec always encodes
		b = []byte(tmpl.String())
	}
	sum := sha256.Sum256(b)
	return revision + "@" + hex.EncodeToString(sum[:])[:digestLen]
}

// SplitIdentity returns the revision and the digest of an identity that
// Identity made ("v2@3f2a1c9b": "v2", "3f2a1c9b"); for any other string
// (a bare revision name), the string itself and "".
func SplitIdentity(identity string) (revision, digest string) {
	i := strings.LastIndexByte(identity, '@')
	if i < 0 || len(identity)-i-1 != digestLen {
		return identity, ""
	}
	d := identity[i+1:]
	for _, c := range d {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return identity, ""
		}
	}
	return identity[:i], d
}
