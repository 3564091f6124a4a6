package retry_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/serve/retry"
)

func TestParseRetryAfter(t *testing.T) {
	now := t0 // Sun, 01 Mar 2026 12:00:00 GMT
	huge := time.Duration(1<<63-1) / time.Second * time.Second
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"0", 0, false},
		{"1", time.Second, false},
		{"120", 2 * time.Minute, false},
		{" \t30 ", 30 * time.Second, false},
		{"0042", 42 * time.Second, false},
		{"99999999999999999999999", huge, false},
		{"9223372036", 9223372036 * time.Second, false},
		{"9223372037", huge, false},
		{"Sun, 01 Mar 2026 12:00:30 GMT", 30 * time.Second, false}, // IMF-fixdate
		{"Sunday, 01-Mar-26 12:01:00 GMT", time.Minute, false},     // RFC 850
		{"Sun Mar  1 12:00:05 2026", 5 * time.Second, false},       // asctime
		{"Sun, 01 Mar 2026 11:00:00 GMT", 0, false},                // in the past
		{"Thu, 01 Jan 1970 00:00:00 GMT", 0, false},
		{"", 0, true},
		{"   ", 0, true},
		{"-1", 0, true},
		{"+5", 0, true},
		{"1.5", 0, true},
		{"5s", 0, true},
		{"soon", 0, true},
		{"Sun, 01 Mar 2026 12:00:30 PST", 0, true},
		{"2026-03-01T12:00:30Z", 0, true},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(tt.in), func(t *testing.T) {
			got, err := retry.ParseRetryAfter(tt.in, now)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
			if err != nil && (!errors.Is(err, retry.ErrBadRetryAfter) || !strings.HasPrefix(err.Error(), "retry: ")) {
				t.Errorf("error %v does not wrap ErrBadRetryAfter", err)
			}
		})
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", " 7 ", "99999999999999999999", "Sun, 01 Mar 2026 12:00:30 GMT",
		"Sunday, 01-Mar-26 12:01:00 GMT", "Sun Mar  1 12:00:05 2026", "", "-1", "1e3", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := retry.ParseRetryAfter(s, t0)
		if d < 0 {
			t.Fatalf("negative wait %v for %q", d, s)
		}
		if err != nil {
			if d != 0 || !errors.Is(err, retry.ErrBadRetryAfter) {
				t.Fatalf("error %v with wait %v for %q", err, d, s)
			}
			return
		}
		trimmed := strings.Trim(s, " \t")
		if n, perr := strconv.ParseUint(trimmed, 10, 63); perr == nil && trimmed != "" && trimmed[0] != '+' {
			if int64(n) <= (1<<63-1)/int64(time.Second) && d != time.Duration(n)*time.Second {
				t.Fatalf("%q parsed as %v, want %d seconds", s, d, n)
			}
		}
		// Parsing is a function of its input: same answer twice.
		if d2, _ := retry.ParseRetryAfter(s, t0); d2 != d {
			t.Fatalf("non-deterministic: %v then %v", d, d2)
		}
	})
}
