package gatewaytest_test

import (
	"errors"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/kubetest/gatewaytest"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

func httpRoute(ns, name string, parents int) *gwv1.HTTPRoute {
	rt := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for i := range parents {
		rt.Spec.ParentRefs = append(rt.Spec.ParentRefs, gwv1.ParentReference{Name: gwv1.ObjectName("gw" + string(rune('a'+i)))})
	}
	return rt
}

// waitAccepted polls until every named route is accepted at generation gen.
func waitAccepted(t *testing.T, env *kubetest.Env, ns string, gen int64, names ...string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, name := range names {
		for {
			cur, err := env.Gateway.GatewayV1().HTTPRoutes(ns).Get(t.Context(), name, metav1.GetOptions{})
			if err == nil && cur.Generation == gen && gatewaytest.Accepted(cur) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("route %s not accepted at generation %d: %+v %v", name, gen, cur, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func TestPlayerAcceptsEveryGeneration(t *testing.T) {
	t.Parallel()
	for _, delay := range []time.Duration{0, 30 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			t.Parallel()
			env := kubetest.Get(t)
			ns := env.Namespace(t)
			ctx := t.Context()
			names := []string{"one", "two", "three"}
			for i, name := range names {
				if _, err := env.Gateway.GatewayV1().HTTPRoutes(ns).Create(ctx, httpRoute(ns, name, i+1), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			p := gatewaytest.Play(t, env.Gateway, ns, gatewaytest.PlayerOptions{Delay: delay, Workers: 2})
			defer p.Stop()
			waitAccepted(t, env, ns, 1, names...)

			// A new generation of one route is accepted again.
			cur, err := env.Gateway.GatewayV1().HTTPRoutes(ns).Get(ctx, "two", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cur.Spec.Hostnames = []gwv1.Hostname{"two.example"}
			if _, err := env.Gateway.GatewayV1().HTTPRoutes(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitAccepted(t, env, ns, 2, "two")
			for _, name := range names {
				cur, err := env.Gateway.GatewayV1().HTTPRoutes(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if got, want := len(cur.Status.Parents), len(cur.Spec.ParentRefs); got != want {
					t.Errorf("%s: %d parent statuses, want %d", name, got, want)
				}
			}
			// Each generation is written once, unless a write was refused
			// and written again.
			if got := p.Written(); got < 4 || got > 4+p.Refused() {
				t.Errorf("Written = %d, want 4 (+ up to %d refused)", got, p.Refused())
			}
			if p.Conflicts() > p.Refused() {
				t.Errorf("Conflicts %d > Refused %d", p.Conflicts(), p.Refused())
			}
			if lags := p.Lags(); len(lags) == 0 || int64(len(lags)) > p.Written() {
				t.Errorf("%d lags for %d writes", len(lags), p.Written())
			} else if delay > 0 {
				for _, l := range lags {
					if l < delay {
						t.Errorf("lag %v shorter than the delay %v", l, delay)
					}
				}
			}
			p.ResetLags()
			if lags := p.Lags(); len(lags) != 0 {
				t.Errorf("after ResetLags: %v", lags)
			}
			if errs := p.Errors(); len(errs) != 0 {
				t.Errorf("errors: %v", errs)
			}
			p.Stop()
			p.Stop() // twice is fine
		})
	}
}

type fatalTB struct{ msg string }

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = format
	_ = args
}

func TestPlayerOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		opts  gatewaytest.PlayerOptions
		valid bool
	}{
		{gatewaytest.PlayerOptions{}, true},
		{gatewaytest.PlayerOptions{Delay: time.Millisecond, Workers: 3}, true},
		{gatewaytest.PlayerOptions{Delay: -1}, false},
		{gatewaytest.PlayerOptions{Workers: -1}, false},
	} {
		err := tc.opts.Validate()
		if (err == nil) != tc.valid || (err != nil && !errors.Is(err, gatewaytest.ErrPlayerOptions)) {
			t.Errorf("%+v: Validate() = %v, want valid %v", tc.opts, err, tc.valid)
		}
	}
	var tb fatalTB
	if p := gatewaytest.Play(&tb, nil, "ns", gatewaytest.PlayerOptions{Workers: -1}); p != nil || tb.msg == "" {
		t.Errorf("Play with invalid options: %v, message %q", p, tb.msg)
	}
}
