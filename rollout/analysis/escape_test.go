package analysis_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/rollout/analysis"
)

// rendered returns the queries and requests queries a Source received for
// the checks of a, in the order sent, at one instant (the newest).
func rendered(t *testing.T, a *analysis.Analysis) (queries, requests []string) {
	t.Helper()
	at := time.Time{}
	a.Source = analysis.SourceFunc(func(_ context.Context, _ *analysis.Check, _ analysis.Vars, q, rq string, x time.Time) (analysis.Measurement, error) {
		if at.IsZero() {
			at = x
		}
		if x.Equal(at) {
			queries, requests = append(queries, q), append(requests, rq)
		}
		return analysis.Measurement{Value: 1, Requests: 100}, nil
	})
	if _, _, err := a.Health(rollout.WithState(context.Background(), progressing())); err != nil {
		t.Fatal(err)
	}
	return queries, requests
}

// TestRenderedQueriesHostileNames: names that are valid Kubernetes names but
// carry characters that mean something in a regular expression (a dot in a
// route's name: HTTPRoute names are DNS subdomains) land in the built-in
// queries escaped for where they land: the regular expression escaping,
// then the PromQL string escaping of its backslashes (web\\.v2 in the
// query text is the regular expression web\.v2), and written as Traefik
// writes them in its service label (web.v2 is web-v2 there). A backslash
// alone before a dot is the "unknown escape sequence" Prometheus refuses.
func TestRenderedQueriesHostileNames(t *testing.T) {
	svc := func(ns, route, cns, cname string) string {
		return `httproute-` + ns + `-` + route + `-gw-.*-svc-` + cns + `-` + cname + `-[0-9]+@kubernetesgateway`
	}
	for _, tc := range []struct {
		name                    string
		ns, route, cns, backend string
		service                 string // the service matcher, as in the query text
	}{
		{"plain", "shop", "web", "shop", "web-b", svc("shop", "web", "shop", "web-b")},
		{"a dot in the route", "shop", "web.v2", "shop", "web-b", svc("shop", "web-v2", "shop", "web-b")},
		{"dots and dashes everywhere a name allows them", "shop-prod", "api.shop.example.com", "backends-1", "web-v2-canary",
			svc("shop-prod", "api-shop-example-com", "backends-1", "web-v2-canary")},
		{"digits first", "0ns", "1.route-2", "0ns", "a1", svc("0ns", "1-route-2", "0ns", "a1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAnalysis(nil, fake.NewClock(t0.Add(5*time.Second)))
			a.Namespace, a.Route = tc.ns, tc.route
			a.B = analysis.ServiceRef{Namespace: tc.cns, Name: tc.backend, Port: 80}
			a.Checks = []analysis.Check{analysis.SuccessRate(0.99), analysis.LatencyQuantile(0.9, 300*time.Millisecond)}
			qs, rqs := rendered(t, a)
			s := tc.service
			requests := `sum(increase(traefik_service_requests_total{service=~"` + s + `"}[30s]))`
			want := []string{
				`sum(rate(traefik_service_requests_total{service=~"` + s + `",code!~"5.."}[30s])) / sum(rate(traefik_service_requests_total{service=~"` + s + `"}[30s]))`,
				`histogram_quantile(0.9, sum by (le) (rate(traefik_service_request_duration_seconds_bucket{service=~"` + s + `"}[30s])))`,
			}
			if diff := cmp.Diff(want, qs); diff != "" {
				t.Errorf("queries (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{requests, requests}, rqs); diff != "" {
				t.Errorf("requests queries (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRenderedQueriesCustom: the template functions of a custom query, for
// a label value (str) and a regular expression (re), with names a
// Kubernetes object may have and a Traefik service label of the
// Kubernetes providers (<ns>-<service>-<port>@kubernetes).
func TestRenderedQueriesCustom(t *testing.T) {
	one := 1.0
	a := newAnalysis(nil, fake.NewClock(t0.Add(5*time.Second)))
	a.Namespace, a.Route = "shop-prod", "web.v2"
	a.B = analysis.ServiceRef{Namespace: "shop-prod", Name: "web-v2", Port: 80}
	a.Checks = []analysis.Check{
		{Name: "label", Max: &one, Query: `sum(up{route="{{str .Route}}",service="{{str .Namespace}}-{{str .Canary.Name}}-{{.Canary.Port}}@kubernetes"})`},
		{Name: "regexp", Max: &one, Query: `sum(up{route=~"{{re .Route}}",pod=~"{{re .Canary.Name}}-.*"})`},
		{Name: "traefik", Max: &one, Query: `sum(up{service=~"{{re (traefik .Namespace)}}-{{re (traefik .Route)}}-[0-9]+@kubernetes"})`},
	}
	qs, _ := rendered(t, a)
	want := []string{
		`sum(up{route="web.v2",service="shop-prod-web-v2-80@kubernetes"})`,
		`sum(up{route=~"web\\.v2",pod=~"web-v2-.*"})`,
		`sum(up{service=~"shop-prod-web-v2-[0-9]+@kubernetes"})`,
	}
	if diff := cmp.Diff(want, qs); diff != "" {
		t.Errorf("queries (-want +got):\n%s", diff)
	}
}

func TestPromQLEscaping(t *testing.T) {
	for _, tc := range []struct {
		in, str, re, traefik string
	}{
		{"web", "web", "web", "web"},
		{"web.v2", "web.v2", `web\\.v2`, "web-v2"},
		{`a"b\c`, `a\"b\\c`, `a\"b\\\\c`, "a-b-c"},
		{"x+y*(z)?", "x+y*(z)?", `x\\+y\\*\\(z\\)\\?`, "x-y-z"},
		{"line\nbreak", `line\nbreak`, `line\nbreak`, "line-break"},
		{"..a..b..", "..a..b..", `\\.\\.a\\.\\.b\\.\\.`, "a-b"},
		{"default-web-v2-80@kubernetes", "default-web-v2-80@kubernetes", "default-web-v2-80@kubernetes", "default-web-v2-80-kubernetes"},
		{"", "", "", ""},
	} {
		if got := analysis.PromQLString(tc.in); got != tc.str {
			t.Errorf("PromQLString(%q) = %q, want %q", tc.in, got, tc.str)
		}
		if got := analysis.PromQLRegexp(tc.in); got != tc.re {
			t.Errorf("PromQLRegexp(%q) = %q, want %q", tc.in, got, tc.re)
		}
		if got := analysis.TraefikName(tc.in); got != tc.traefik {
			t.Errorf("TraefikName(%q) = %q, want %q", tc.in, got, tc.traefik)
		}
	}
}

// stringLiteral reads the double-quoted PromQL string literal that starts
// at s[0] the way PromQL's lexer delimits one (a backslash escapes the next
// character; a raw newline is an error), and returns it with its quotes and
// the rest of s.
func stringLiteral(s string) (lit, rest string, ok bool) {
	if s == "" || s[0] != '"' {
		return "", s, false
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '\n':
			return "", s, false
		case '"':
			return s[:i+1], s[i+1:], true
		}
	}
	return "", s, false
}

// FuzzPromQLEscaping: whatever the name, a query that puts it through str
// in a label matcher and through re in a regexp matcher has two well-formed
// string literals (the quoting balanced, the query's text after them
// intact), each decoding (strconv.Unquote, the escapes PromQL reads) to
// the name itself and to a regular expression that is the name literally:
// it compiles, it is a literal (no metacharacter left), and it matches the
// name. TraefikName leaves only letters, digits and single inner dashes.
func FuzzPromQLEscaping(f *testing.F) {
	for _, s := range []string{"web", "web.v2", "default-web-v2-80@kubernetes", `a"b\c`, "x{1}", "é.ü", "\x00\t", "-a-", "a..b", "[0-9]+", "\\.", `"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if !utf8.ValidString(name) {
			t.Skip("label values are UTF-8")
		}
		a := newAnalysis(nil, fake.NewClock(t0.Add(5*time.Second)))
		a.Route = name
		one := 1.0
		a.Checks = []analysis.Check{{Name: "q", Max: &one, Query: `x{l="{{str .Route}}",r=~"{{re .Route}}"}`}}
		var q string
		a.Source = analysis.SourceFunc(func(_ context.Context, _ *analysis.Check, _ analysis.Vars, query, _ string, _ time.Time) (analysis.Measurement, error) {
			q = query
			return analysis.Measurement{Value: 1}, nil
		})
		if _, _, err := a.Health(rollout.WithState(context.Background(), progressing())); err != nil {
			t.Fatal(err)
		}
		rest, ok := strings.CutPrefix(q, `x{l=`)
		if !ok {
			t.Fatalf("query %q", q)
		}
		lit, rest, ok := stringLiteral(rest)
		if !ok {
			t.Fatalf("the label value of %q is not a well-formed string literal", q)
		}
		if v, err := strconv.Unquote(lit); err != nil || v != name {
			t.Fatalf("the label value %s decodes to %q, %v; want %q", lit, v, err, name)
		}
		rest, ok = strings.CutPrefix(rest, `,r=~`)
		if !ok {
			t.Fatalf("after the label value: %q", rest)
		}
		lit, rest, ok = stringLiteral(rest)
		if !ok || rest != "}" {
			t.Fatalf("the regexp of %q is not a well-formed string literal followed by }: %q", q, rest)
		}
		expr, err := strconv.Unquote(lit)
		if err != nil {
			t.Fatalf("the regexp %s does not decode: %v", lit, err)
		}
		re, err := regexp.Compile("^(?:" + expr + ")$")
		if err != nil {
			t.Fatalf("the regexp %q of %q does not compile: %v", expr, name, err)
		}
		if prefix, complete := regexp.MustCompile(expr).LiteralPrefix(); !complete || prefix != name {
			t.Fatalf("the regexp %q is not the literal %q (prefix %q, complete %v)", expr, name, prefix, complete)
		}
		if !re.MatchString(name) {
			t.Fatalf("the regexp %q does not match %q", expr, name)
		}
		n := analysis.TraefikName(name)
		for i, r := range n {
			if r == '-' && (i == 0 || i == len(n)-1 || n[i-1] == '-') {
				t.Fatalf("TraefikName(%q) = %q: a dash at an end or after another", name, n)
			}
		}
		if strings.ContainsFunc(n, func(r rune) bool { return r != '-' && !regexp.MustCompile(`^[\pL\pN]$`).MatchString(string(r)) }) {
			t.Fatalf("TraefikName(%q) = %q: other than letters, digits and dashes", name, n)
		}
	})
}

// The template functions of a check's query escape a value for the
// context it lands in.
func ExamplePromQLRegexp() {
	fmt.Println(analysis.PromQLRegexp("web.v2"))
	fmt.Printf("pod=~%q\n", regexp.QuoteMeta("web.v2")+"-.*") // the same, through Go's quoting
	// Output:
	// web\\.v2
	// pod=~"web\\.v2-.*"
}

func ExamplePromQLString() {
	fmt.Println(analysis.PromQLString(`say "hi"`))
	// Output: say \"hi\"
}

func ExampleTraefikName() {
	fmt.Println(analysis.TraefikName("api.shop.example.com"))
	// Output: api-shop-example-com
}
