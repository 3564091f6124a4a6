package gateway

import (
	"errors"
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
			name: "a rule with only one backend and a third backend are left alone",
			rules: ruleRefs{
				{ref("svc", ptr(int32(100)), withPort(80)), ref("svc-canary", ptr(int32(0)), withPort(80)), ref("mirror", ptr(int32(5)))},
				{ref("svc", ptr(int32(1)), withPort(80))},
			},
			want:    [][]*int32{{ptr(int32(70)), ptr(int32(30)), ptr(int32(5))}, {ptr(int32(1))}},
			changed: true,
		},
		{
			name: "names are compared whole, and port, kind and namespace count",
			rules: ruleRefs{
				{ref("svc", nil, withPort(80)), ref("svc-canary", nil, withPort(80)),
					ref("svc-canary", ptr(int32(9)), withPort(81)),
					ref("svc-canary", ptr(int32(9)), withPort(80), withKind("ServiceImport")),
					ref("svc-canary", ptr(int32(9)), withPort(80), withNS("other"))},
			},
			want:    [][]*int32{{ptr(int32(70)), ptr(int32(30)), ptr(int32(9)), ptr(int32(9)), ptr(int32(9))}},
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
// both, and nothing at all when it fails.
func TestSetWeightsTouchesOnlyItsWeights(t *testing.T) {
	names := []string{"a", "b", "a-x", "xb", "c"}
	rapid.Check(t, func(t *rapid.T) {
		var rules ruleRefs
		for i, n := 0, rapid.IntRange(0, 4).Draw(t, "rules"); i < n; i++ {
			var refs []*gwv1.BackendRef
			for j, m := 0, rapid.IntRange(0, 5).Draw(t, "refs"); j < m; j++ {
				r := ref(rapid.SampledFrom(names).Draw(t, "name"), nil)
				if rapid.Bool().Draw(t, "weighted") {
					r.Weight = ptr(rapid.Int32Range(0, 1000).Draw(t, "w"))
				}
				if rapid.Bool().Draw(t, "otherNS") {
					r.Namespace = ptr(gwv1.Namespace("other"))
				}
				refs = append(refs, r)
			}
			rules = append(rules, refs)
		}
		before := cloneRules(rules)
		a, b := Backend{Name: "a"}, Backend{Name: "b"}
		wa := rapid.Int32Range(0, 100).Draw(t, "wa")
		_, err := setWeights(rules, &a, &b, "ns", wa, 100-wa)
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
			{BackendRef: *ref("other", nil)},
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
