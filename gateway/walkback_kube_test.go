package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// fillerAnnotation is the annotation another tool fills a route with.
const fillerAnnotation = "gitops.example/last-applied"

// onConflict calls update until it returns anything but a conflict.
func onConflict(update func() error) error {
	for {
		if err := update(); !apierrors.IsConflict(err) {
			return err
		}
	}
}

// fillAnnotations is another tool filling the route's annotations until
// room bytes are left under the API server's limit; with dropState it
// first replaces the state annotation with its own.
func fillAnnotations(t testing.TB, c client.Client, ref gateway.RouteRef, room int, dropState bool) {
	t.Helper()
	err := onConflict(func() error {
		var rt gwv1.HTTPRoute
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &rt); err != nil {
			return err
		}
		if dropState {
			delete(rt.Annotations, gateway.StateAnnotation)
		}
		delete(rt.Annotations, fillerAnnotation)
		used := len(fillerAnnotation)
		for k, v := range rt.Annotations {
			used += len(k) + len(v)
		}
		if rt.Annotations == nil {
			rt.Annotations = map[string]string{}
		}
		rt.Annotations[fillerAnnotation] = strings.Repeat("x", apivalidation.TotalAnnotationSizeLimitB-used-room)
		return c.Update(context.Background(), &rt)
	})
	if err != nil {
		t.Fatalf("filling the annotations of %s: %v", ref, err)
	}
}

// clearAnnotations is the other tool removing what it added.
func clearAnnotations(t testing.TB, c client.Client, ref gateway.RouteRef) {
	t.Helper()
	err := onConflict(func() error {
		var rt gwv1.HTTPRoute
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &rt); err != nil {
			return err
		}
		delete(rt.Annotations, fillerAnnotation)
		return c.Update(context.Background(), &rt)
	})
	if err != nil {
		t.Fatalf("clearing the annotations of %s: %v", ref, err)
	}
}

// TestAbortWithFullAnnotations: on the real API server, another tool
// fills the route's annotations up to the 256 KiB limit while a rollout
// runs at weight 50 with its state on the route, and the rollout is
// aborted. The walk back still returns all traffic to the stable side:
// with the state reduced when only that fits, and with the weights alone
// when the other tool also took the state's place (the state is then
// stored once the tool makes room). The canary's weight never rises after
// the fill, and the other tool's annotation is left as it wrote it.
func TestAbortWithFullAnnotations(t *testing.T) {
	env := kubetest.Get(t)
	for _, tc := range []struct {
		name      string
		dropState bool // the other tool replaced the state annotation
	}{
		{name: "room only for less"},
		{name: "state replaced", dropState: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			newRoute(t, env.Client, ns, "web")
			ref := gateway.RouteRef{Namespace: ns, Name: "web"}
			router, err := gateway.NewRouter(env.Client, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary})
			if err != nil {
				t.Fatal(err)
			}
			store, err := router.AnnotationStore(ref)
			if err != nil {
				t.Fatal(err)
			}
			clock := fake.NewClock(t0)
			a, b := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0})
			strat := strategy.Incremental{StepPercent: 25, MaxSurgePercent: 50, Interval: metav1.Duration{Duration: 10 * time.Second}}
			cmds := make(chan rollout.Command, 1)
			var (
				mu                        sync.Mutex
				filled, cleared, returned bool
				last                      int32
				marked                    bool
				problems                  []string
			)
			r := &rollout.Runner{Strategy: strat, Router: router, A: a, B: b, Clock: clock, Store: store,
				Observer: rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
					mu.Lock()
					defer mu.Unlock()
					playController(t, env.Client, ref)
					w, err := router.Weights(context.Background())
					if err != nil {
						problems = append(problems, err.Error())
						return
					}
					if filled && w.Weights.B > last {
						problems = append(problems, fmt.Sprintf("%s: the canary's weight rose from %d to %d after the fill", e.Time.Sub(t0), last, w.Weights.B))
					}
					last = w.Weights.B
					for _, c := range e.After.Conditions {
						if c.Type == strategy.ConditionDegraded && c.Reason == rollout.ReasonStateRefused {
							marked = true
							if !strings.Contains(c.Message, gateway.StateAnnotation) {
								problems = append(problems, "the Degraded condition does not name the annotation: "+c.Message)
							}
						}
					}
					if !filled && w.Weights.B >= 50 && e.Err == nil {
						filled = true
						fillAnnotations(t, env.Client, ref, 0, tc.dropState)
						cmds <- func(s strategy.State, now time.Time) strategy.State {
							return s.Abort("the canary fails", now)
						}
					}
					if filled && !cleared && e.After.Phase == strategy.PhaseAborted && w.Weights == (rollout.Weights{A: 100}) {
						returned = true
						if tc.dropState {
							cleared = true
							clearAnnotations(t, env.Client, ref)
						}
					}
				})}
			done := make(chan error, 1)
			var end strategy.State
			go func() {
				s, err := r.Run(context.Background(), strategy.NewState("v1", "v2"), cmds)
				end = s
				done <- err
			}()
			var runErr error
			advanceUntil(t, clock, func() bool {
				select {
				case runErr = <-done:
					return true
				default:
					return false
				}
			})
			mu.Lock()
			defer mu.Unlock()
			for _, p := range problems {
				t.Error(p)
			}
			if runErr != nil && !errors.Is(runErr, rollout.ErrStateRefused) {
				t.Errorf("Run: %v", runErr)
			}
			if !returned {
				t.Error("the walk back did not return all traffic to the stable side")
			}
			if !marked {
				t.Error("no reconcile reported Degraded with reason StateRefused")
			}
			if end.Phase != strategy.PhaseAborted {
				t.Fatalf("ended %s: %s", end.Phase, end.Message)
			}
			st, w, ok := stateOn(t, env.Client, ref)
			if !ok || st.Phase != strategy.PhaseAborted || st.Desired.Weight != 0 || w != 0 {
				t.Errorf("on the route at the end: weight %d, state %s asking %d (present %v)", w, st.Phase, st.Desired.Weight, ok)
			}
			var rt gwv1.HTTPRoute
			if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &rt); err != nil {
				t.Fatal(err)
			}
			if _, ok := rt.Annotations[fillerAnnotation]; ok == cleared {
				t.Errorf("the other tool's annotation present %v, want %v", ok, !cleared)
			}
		})
	}
}

// TestStateRefusedByTheAPIServer: the API server's answer to annotations
// over its limit (a write that raced with another tool's) is reported as a
// *rollout.StateRefusedError naming the route and the annotation, not
// Permanent; the store's own check refuses such a write without sending
// it; other refusals are left as they are.
func TestStateRefusedByTheAPIServer(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	newRoute(t, env.Client, ns, "web")
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	ctx := context.Background()

	var rt gwv1.HTTPRoute
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &rt); err != nil {
		t.Fatal(err)
	}
	rt.Annotations = map[string]string{fillerAnnotation: strings.Repeat("x", apivalidation.TotalAnnotationSizeLimitB)}
	err := env.Client.Update(ctx, &rt)
	if err == nil || !strings.Contains(err.Error(), "metadata.annotations: Too long") {
		t.Fatalf("the API server's answer to oversized annotations: %v", err)
	}
	got := gateway.StateRefused(err, ref)
	var refused *rollout.StateRefusedError
	if !errors.As(got, &refused) || refused.Key != gateway.StateAnnotation || refused.Field != "metadata.annotations" || refused.Object != ref.String() {
		t.Fatalf("mapped: %#v, want a *StateRefusedError naming %s and %s", got, ref, gateway.StateAnnotation)
	}
	if rollout.IsPermanent(got) {
		t.Errorf("%v is Permanent", got)
	}

	// A route filled to the limit: the store refuses before writing.
	fillAnnotations(t, env.Client, ref, 0, false)
	router, err := gateway.NewRouter(env.Client, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	store, err := router.AnnotationStore(ref)
	if err != nil {
		t.Fatal(err)
	}
	before := router.Counts().Writes
	for name, write := range map[string]func() error{
		"Save": func() error { return store.Save(ctx, strategy.NewState("v1", "v2")) },
		"SaveWeights": func() error {
			return store.SaveWeights(ctx, rollout.Weights{A: 90, B: 10}, strategy.NewState("v1", "v2"))
		},
		"SaveRoutes": func() error {
			return store.SaveRoutes(ctx, rollout.Routes{Weights: rollout.Weights{A: 90, B: 10}, Canary: strategy.SideB}, strategy.NewState("v1", "v2"))
		},
	} {
		err := write()
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), "metadata.annotations["+gateway.StateAnnotation+"]") || rollout.IsPermanent(err) {
			t.Errorf("%s on a full route: %v, want a StateRefusedError naming the annotation", name, err)
		}
	}
	if got := router.Counts().Writes - before; got != 0 {
		t.Errorf("%d writes of a full route", got)
	}
	if w, err := router.Weights(ctx); err != nil || w.Weights != (rollout.Weights{A: 100}) {
		t.Errorf("weights after the refusals: %+v %v", w.Weights, err)
	}
	// The weights alone still go through.
	if err := router.SetWeights(ctx, rollout.Weights{A: 90, B: 10}); err != nil {
		t.Errorf("SetWeights on a full route: %v", err)
	}
}
