package gateway

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func ptr[T any](v T) *T { return &v }

func ref(name string, weight *int32, opts ...func(*gwv1.BackendRef)) *gwv1.BackendRef {
	r := &gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(name)}, Weight: weight}
	for _, o := range opts {
		o(r)
	}
	return r
}

func withPort(p int32) func(*gwv1.BackendRef) {
	return func(r *gwv1.BackendRef) { r.Port = ptr(gwv1.PortNumber(p)) }
}

func withKind(k string) func(*gwv1.BackendRef) {
	return func(r *gwv1.BackendRef) { r.Kind = ptr(gwv1.Kind(k)) }
}

func withNS(ns string) func(*gwv1.BackendRef) {
	return func(r *gwv1.BackendRef) { r.Namespace = ptr(gwv1.Namespace(ns)) }
}

func weightsOf(rules ruleRefs) [][]*int32 {
	out := make([][]*int32, len(rules))
	for i, refs := range rules {
		for _, r := range refs {
			out[i] = append(out[i], r.Weight)
		}
	}
	return out
}

func TestSetWeights(t *testing.T) {
	a := Backend{Name: "svc", Port: 80}
	b := Backend{Name: "svc-canary", Port: 80}
	cases := []struct {
		name    string
		rules   ruleRefs
		want    [][]*int32
		changed bool
		err     error
	}{
		{
			name:    "both in one rule, omitted weights",
			rules:   ruleRefs{{ref("svc", nil, withPort(80)), ref("svc-canary", nil, withPort(80))}},
			want:    [][]*int32{{ptr(int32(70)), ptr(int32(30))}},
			changed: true,
		},
		{
			name:  "already right: no change",
			rules: ruleRefs{{ref("svc", ptr(int32(70)), withPort(80)), ref("svc-canary", ptr(int32(30)), withPort(80))}},
			want:  [][]*int32{{ptr(int32(70)), ptr(int32(30))}},
		},
		{
			name: "a rule with only one backend and a third backend at weight 0 are left alone",
			rules: ruleRefs{
				{ref("svc", ptr(int32(100)), withPort(80)), ref("svc-canary", ptr(int32(0)), withPort(80)), ref("mirror", ptr(int32(0)))},
				{ref("svc", ptr(int32(1)), withPort(80)), ref("mirror", ptr(int32(5)))},
			},
			want:    [][]*int32{{ptr(int32(70)), ptr(int32(30)), ptr(int32(0))}, {ptr(int32(1)), ptr(int32(5))}},
			changed: true,
		},
		{
			name: "names are compared whole, and port, kind and namespace count",
			rules: ruleRefs{
				{ref("svc", nil, withPort(80)), ref("svc-canary", nil, withPort(80)),
					ref("svc-canary", ptr(int32(0)), withPort(81)),
					ref("svc-canary", ptr(int32(0)), withPort(80), withKind("ServiceImport")),
					ref("svc-canary", ptr(int32(0)), withPort(80), withNS("other"))},
			},
			want:    [][]*int32{{ptr(int32(70)), ptr(int32(30)), ptr(int32(0)), ptr(int32(0)), ptr(int32(0))}},
			changed: true,
		},
		{
			name:  "canary missing",
			rules: ruleRefs{{ref("svc", nil, withPort(80)), ref("svc-canary-2", nil, withPort(80))}},
			want:  [][]*int32{{nil, nil}},
			err:   &BackendNotFoundError{},
		},
		{
			name:  "in no rule together",
			rules: ruleRefs{{ref("svc", nil, withPort(80))}, {ref("svc-canary", nil, withPort(80))}},
			want:  [][]*int32{{nil}, {nil}},
			err:   &NoSharedRuleError{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			changed, err := setWeights(tc.rules, &a, &b, "ns", 70, 30)
			if tc.err != nil {
				if err == nil || !errors.Is(err, ErrInvalid) {
					t.Fatalf("err %v, want %T matching ErrInvalid", err, tc.err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if changed != tc.changed {
				t.Errorf("changed %v, want %v", changed, tc.changed)
			}
			if diff := cmp.Diff(tc.want, weightsOf(tc.rules)); diff != "" {
				t.Errorf("weights (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExtraBackend: a rule that holds both backends and anything else that
// gets traffic, or one of them twice, is refused by setWeights and
// readWeights alike, with the rule and the ref named, and nothing changes.
func TestExtraBackend(t *testing.T) {
	a := Backend{Name: "svc", Port: 80}
	b := Backend{Name: "svc-canary", Port: 80}
	pair := func(extra ...*gwv1.BackendRef) []*gwv1.BackendRef {
		return append([]*gwv1.BackendRef{ref("svc", ptr(int32(100)), withPort(80)), ref("svc-canary", ptr(int32(0)), withPort(80))}, extra...)
	}
	cases := []struct {
		name  string
		rules ruleRefs
		want  *ExtraBackendError // nil: accepted
	}{
		{
			name:  "third backend, weight omitted (means 1)",
			rules: ruleRefs{pair(ref("mirror", nil, withPort(80)))},
			want:  &ExtraBackendError{Rule: 0, Backend: "Service ns/mirror:80"},
		},
		{
			name:  "third backend, weight 50",
			rules: ruleRefs{pair(ref("mirror", ptr(int32(50))))},
			want:  &ExtraBackendError{Rule: 0, Backend: "Service ns/mirror", Weight: ptr(int32(50))},
		},
		{
			name:  "third backend, weight 0: no traffic, accepted",
			rules: ruleRefs{pair(ref("mirror", ptr(int32(0))))},
		},
		{
			name:  "third backend in the second managed rule",
			rules: ruleRefs{pair(), pair(ref("mirror", ptr(int32(1))))},
			want:  &ExtraBackendError{Rule: 1, Backend: "Service ns/mirror", Weight: ptr(int32(1))},
		},
		{
			name:  "third backend in a rule with only one side: not managed, accepted",
			rules: ruleRefs{pair(), {ref("svc", nil, withPort(80)), ref("mirror", nil)}},
		},
		{
			name:  "same name, other port",
			rules: ruleRefs{pair(ref("svc-canary", ptr(int32(9)), withPort(81)))},
			want:  &ExtraBackendError{Rule: 0, Backend: "Service ns/svc-canary:81", Weight: ptr(int32(9))},
		},
		{
			name: "same name, other group and kind",
			rules: ruleRefs{pair(ref("svc-canary", nil, withPort(80), withKind("ServiceImport"),
				func(r *gwv1.BackendRef) { r.Group = ptr(gwv1.Group("multicluster.x-k8s.io")) }))},
			want: &ExtraBackendError{Rule: 0, Backend: "multicluster.x-k8s.io/ServiceImport ns/svc-canary:80"},
		},
		{
			name:  "same name, other namespace",
			rules: ruleRefs{pair(ref("svc-canary", ptr(int32(3)), withPort(80), withNS("other")))},
			want:  &ExtraBackendError{Rule: 0, Backend: "Service other/svc-canary:80", Weight: ptr(int32(3))},
		},
		{
			name:  "A twice",
			rules: ruleRefs{pair(ref("svc", ptr(int32(100)), withPort(80)))},
			want:  &ExtraBackendError{Rule: 0, Backend: "Service ns/svc:80", Duplicate: true},
		},
		{
			name:  "A twice, the second at weight 0: still refused, it would get A's weight",
			rules: ruleRefs{pair(ref("svc", ptr(int32(0)), withPort(80)))},
			want:  &ExtraBackendError{Rule: 0, Backend: "Service ns/svc:80", Duplicate: true},
		},
		{
			name:  "B twice, once with the route's namespace spelled out",
			rules: ruleRefs{pair(ref("svc-canary", ptr(int32(0)), withPort(80), withNS("ns")))},
			want:  &ExtraBackendError{Rule: 0, Backend: "Service ns/svc-canary:80", Duplicate: true},
		},
		{
			name:  "A twice in a rule without B: not managed, accepted",
			rules: ruleRefs{pair(), {ref("svc", nil, withPort(80)), ref("svc", nil, withPort(80))}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, op := range []string{"setWeights", "readWeights"} {
				rules := cloneRules(tc.rules)
				var err error
				if op == "setWeights" {
					_, err = setWeights(rules, &a, &b, "ns", 70, 30)
				} else {
					_, _, _, err = readWeights(rules, &a, &b, "ns")
				}
				if tc.want == nil {
					if err != nil {
						t.Fatalf("%s: %v", op, err)
					}
					continue
				}
				var got *ExtraBackendError
				if !errors.As(err, &got) {
					t.Fatalf("%s: err %v (%T), want *ExtraBackendError", op, err, err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("%s: error (-want +got):\n%s", op, diff)
				}
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("%s: %v does not match ErrInvalid", op, err)
				}
				if diff := cmp.Diff(weightsOf(tc.rules), weightsOf(rules)); diff != "" {
					t.Errorf("%s: weights changed on error (-before +after):\n%s", op, diff)
				}
			}
		})
	}
}

func TestExtraBackendMessage(t *testing.T) {
	route := RouteRef{Namespace: "shop", Name: "web"}
	cases := []struct {
		err  *ExtraBackendError
		want string
	}{
		{&ExtraBackendError{Route: route, Rule: 2, Backend: "Service shop/web-mirror:80"},
			"gateway: HTTPRoute shop/web rule 2 also sends traffic to Service shop/web-mirror:80 (no weight, which means 1): the Router splits a rule between its two backends only; set that weight to 0 or move Service shop/web-mirror:80 to a rule of its own"},
		{&ExtraBackendError{Route: route, Rule: 0, Backend: "Service shop/web-mirror:80", Weight: ptr(int32(50))},
			"gateway: HTTPRoute shop/web rule 0 also sends traffic to Service shop/web-mirror:80 (weight 50): the Router splits a rule between its two backends only; set that weight to 0 or move Service shop/web-mirror:80 to a rule of its own"},
		{&ExtraBackendError{Route: route, Rule: 0, Backend: "Service shop/web:80", Duplicate: true},
			"gateway: HTTPRoute shop/web rule 0 names Service shop/web:80 more than once: the Router needs exactly one backendRef to each side of a rule it splits"},
	}
	for _, tc := range cases {
		if diff := cmp.Diff(tc.want, tc.err.Error()); diff != "" {
			t.Errorf("message (-want +got):\n%s", diff)
		}
	}
	// withRoute fills in the route, also through wrapping.
	err := withRoute(fmt.Errorf("wrapped: %w", &ExtraBackendError{Backend: "Service shop/x"}), route)
	var e *ExtraBackendError
	if !errors.As(err, &e) || e.Route != route {
		t.Fatalf("route not filled in: %v", err)
	}
}

// TestReadWeights: what Weights reports for a rule is what its refs really
// get: the spec's weights, an omitted one read as 1, summing to 100 only
// when they are the split in percent.
func TestReadWeights(t *testing.T) {
	a := Backend{Name: "svc", Port: 80}
	b := Backend{Name: "svc-canary", Port: 80}
	type result struct {
		A, B  int32
		Agree bool
	}
	cases := []struct {
		name  string
		rules ruleRefs
		want  result
	}{
		{"written pair", ruleRefs{{ref("svc", ptr(int32(70)), withPort(80)), ref("svc-canary", ptr(int32(30)), withPort(80))}},
			result{70, 30, true}},
		{"both omitted: 1 and 1, not 50/50", ruleRefs{{ref("svc", nil, withPort(80)), ref("svc-canary", nil, withPort(80))}},
			result{1, 1, true}},
		{"A omitted: 1, not 0", ruleRefs{{ref("svc", nil, withPort(80)), ref("svc-canary", ptr(int32(99)), withPort(80))}},
			result{1, 99, true}},
		{"B omitted: 1, not 0", ruleRefs{{ref("svc", ptr(int32(100)), withPort(80)), ref("svc-canary", nil, withPort(80))}},
			result{100, 1, true}},
		{"a third ref at weight 0 takes nothing", ruleRefs{{ref("svc", ptr(int32(70)), withPort(80)), ref("mirror", ptr(int32(0))), ref("svc-canary", ptr(int32(30)), withPort(80))}},
			result{70, 30, true}},
		{"managed rules disagree", ruleRefs{
			{ref("svc", ptr(int32(70)), withPort(80)), ref("svc-canary", ptr(int32(30)), withPort(80))},
			{ref("svc-canary", ptr(int32(40)), withPort(80)), ref("svc", ptr(int32(60)), withPort(80))},
		}, result{70, 30, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wa, wb, agree, err := readWeights(tc.rules, &a, &b, "ns")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, result{wa, wb, agree}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestBackendNotFoundNamesTheNearMiss(t *testing.T) {
	a, b := Backend{Name: "svc"}, Backend{Name: "svc-canary", Port: 8080}
	_, err := setWeights(ruleRefs{{ref("svc", nil), ref("svc-canary", nil, withPort(80))}}, &a, &b, "ns", 50, 50)
	var bnf *BackendNotFoundError
	if !errors.As(err, &bnf) || bnf.Near != "Service ns/svc-canary:80" {
		t.Fatalf("err %v (near %q)", err, func() string {
			if bnf != nil {
				return bnf.Near
			}
			return ""
		}())
	}
}

// TestSetWeightsTouchesOnlyItsWeights: on random routes, setWeights changes
// only the weights of refs that name A or B exactly, in rules that hold
// both, and nothing at all when it fails. It fails with *ExtraBackendError
// exactly when a rule holding both also holds a ref that gets traffic or
// names a side twice; when it succeeds, every such rule really splits
// wa/100-wa, and readWeights reports that split.
func TestSetWeightsTouchesOnlyItsWeights(t *testing.T) {
	names := []string{"a", "b", "a-x", "xb", "c"}
	rapid.Check(t, func(t *rapid.T) {
		var rules ruleRefs
		for i, n := 0, rapid.IntRange(0, 4).Draw(t, "rules"); i < n; i++ {
			var refs []*gwv1.BackendRef
			// A tidy rule starts with a and b, and every other ref in it has
			// weight 0, so rules the Router accepts are drawn often.
			tidy := rapid.Bool().Draw(t, "tidy")
			if tidy {
				refs = append(refs, ref("a", nil), ref("b", nil))
			}
			for j, m := 0, rapid.IntRange(0, 5).Draw(t, "refs"); j < m; j++ {
				r := ref(rapid.SampledFrom(names).Draw(t, "name"), nil)
				if rapid.Bool().Draw(t, "weighted") {
					r.Weight = ptr(rapid.Int32Range(0, 1000).Draw(t, "w"))
				}
				if rapid.Bool().Draw(t, "otherNS") {
					r.Namespace = ptr(gwv1.Namespace("other"))
				}
				if tidy && (r.Namespace != nil || (r.Name != "a" && r.Name != "b")) {
					r.Weight = ptr(int32(0))
				}
				refs = append(refs, r)
			}
			rules = append(rules, refs)
		}
		before := cloneRules(rules)
		a, b := Backend{Name: "a"}, Backend{Name: "b"}
		wa := rapid.Int32Range(0, 100).Draw(t, "wa")
		_, err := setWeights(rules, &a, &b, "ns", wa, 100-wa)
		var extra *ExtraBackendError
		if errors.As(err, &extra) != mixedRule(before, &a, &b) {
			t.Fatalf("err %v, but a managed rule with more than the two backends: %v", err, mixedRule(before, &a, &b))
		}
		if err == nil {
			for i, refs := range rules {
				if !holdsBoth(refs, &a, &b, "ns") {
					continue
				}
				var total, toA int32
				for _, r := range refs {
					w := int32(1)
					if r.Weight != nil {
						w = *r.Weight
					}
					total += w
					if a.matches(&r.BackendObjectReference, "ns") {
						toA += w
					}
				}
				if total != 100 || toA != wa {
					t.Fatalf("rule %d: A really gets %d of %d, want %d of 100", i, toA, total, wa)
				}
			}
			ra, rb, agree, rerr := readWeights(rules, &a, &b, "ns")
			if rerr != nil || !agree || ra != wa || rb != 100-wa {
				t.Fatalf("readWeights after setWeights(%d, %d): %d, %d, %v, %v", wa, 100-wa, ra, rb, agree, rerr)
			}
		}
		for i := range rules {
			both := holdsBoth(before[i], &a, &b, "ns")
			for j, r := range rules[i] {
				old := before[i][j]
				mine := a.matches(&old.BackendObjectReference, "ns") || b.matches(&old.BackendObjectReference, "ns")
				if diff := cmp.Diff(old.BackendObjectReference, r.BackendObjectReference); diff != "" {
					t.Fatalf("a reference changed:\n%s", diff)
				}
				if err != nil || !both || !mine {
					if diff := cmp.Diff(old.Weight, r.Weight); diff != "" {
						t.Fatalf("a weight that is not ours changed (err %v):\n%s", err, diff)
					}
					continue
				}
				want := wa
				if b.matches(&old.BackendObjectReference, "ns") {
					want = 100 - wa
				}
				if r.Weight == nil || *r.Weight != want {
					t.Fatalf("rule %d ref %d: weight %v, want %d", i, j, r.Weight, want)
				}
			}
		}
	})
}

// mixedRule is the model of refusal: some rule holds both a and b, and
// also another ref that gets traffic or a second ref to a or b.
func mixedRule(rules ruleRefs, a, b *Backend) bool {
	for _, refs := range rules {
		if !holdsBoth(refs, a, b, "ns") {
			continue
		}
		na, nb := 0, 0
		for _, r := range refs {
			switch {
			case a.matches(&r.BackendObjectReference, "ns"):
				na++
			case b.matches(&r.BackendObjectReference, "ns"):
				nb++
			case r.Weight == nil || *r.Weight > 0:
				return true
			}
		}
		if na > 1 || nb > 1 {
			return true
		}
	}
	return false
}

func cloneRules(rules ruleRefs) ruleRefs {
	out := make(ruleRefs, len(rules))
	for i, refs := range rules {
		for _, r := range refs {
			c := *r.DeepCopy()
			out[i] = append(out[i], &c)
		}
	}
	return out
}

func BenchmarkSetWeights(b *testing.B) {
	route := &gwv1.HTTPRoute{}
	for i := 0; i < 4; i++ {
		route.Spec.Rules = append(route.Spec.Rules, gwv1.HTTPRouteRule{BackendRefs: []gwv1.HTTPBackendRef{
			{BackendRef: *ref("svc", ptr(int32(100)), withPort(80))},
			{BackendRef: *ref("svc-canary", ptr(int32(0)), withPort(80))},
			{BackendRef: *ref("other", ptr(int32(0)))},
		}})
	}
	a, c := Backend{Name: "svc", Port: 80}, Backend{Name: "svc-canary", Port: 80}
	rules := httpRefs(route)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w := int32(i % 101)
		if _, err := setWeights(rules, &a, &c, "ns", 100-w, w); err != nil {
			b.Fatal(err)
		}
	}
}
