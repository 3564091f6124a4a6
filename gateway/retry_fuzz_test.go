package gateway

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzRetryRecord: decodeRetryRecord never panics, refuses with ErrInvalid
// naming the annotation, and what it accepts encodes and decodes to itself.
func FuzzRetryRecord(f *testing.F) {
	for _, seed := range []string{
		`{"mode":"TraefikMiddleware","middleware":"upshift-retry"}`,
		`{"mode":"GatewayAPI","retry":{"codes":[503],"attempts":2,"backoff":"100ms"}}`,
		`{"mode":"GatewayAPI","retry":{}}`,
		`{"mode":"TraefikMiddleware"}`,
		`{"mode":"GatewayAPI","middleware":"m","retry":{}}`,
		`{"mode":"Envoy"}`,
		`null`, ``, `[]`, `{"mode":1}`,
	} {
		f.Add(seed)
	}
	const key = RetryAnnotationPrefix + "0123456789abcdef"
	f.Fuzz(func(t *testing.T, raw string) {
		rec, err := decodeRetryRecord(key, raw)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || rec != nil {
				t.Fatalf("decode %q: %v, %+v", raw, err, rec)
			}
			return
		}
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeRetryRecord(key, string(b))
		if err != nil || !again.equal(rec) {
			t.Fatalf("%q re-encoded as %s decodes to %+v, %v", raw, b, again, err)
		}
	})
}
