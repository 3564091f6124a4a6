// Command consumer is an operator's module in miniature: it pins
// controller-runtime v0.22 and k8s.io/* v0.34 and imports only upshift's
// strategy, rollout and fake packages. hack/consumer.sh checks that
// `go mod tidy` against upshift's root module changes none of its versions,
// then builds and runs it: an Incremental upgrade from v1 to v2 on the fakes,
// reconciled the way a controller would, to completion.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	clk := fake.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	router := fake.NewRouter(clk)
	a, b := fake.NewCapacity(clk, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(clk, fake.CapacityOptions{Replicas: 10, Percent: 0})
	a.SetRevision("v1") // side A runs the first revision
	a.ServingFunc(router.Serving(strategy.SideA))
	b.ServingFunc(router.Serving(strategy.SideB))
	runner := &rollout.Runner{
		Strategy: strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 25},
		Router:   router,
		A:        a, B: b, RevisionA: a, RevisionB: b,
		Clock: clk,
	}
	// The operator's own object: its status embeds the rollout state.
	obj := struct {
		metav1.ObjectMeta
		Status strategy.State
	}{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}}
	obj.Status = obj.Status.Retarget("v1", clk.Now())
	obj.Status = obj.Status.Retarget("v2", clk.Now())

	for i := 0; !obj.Status.Phase.Terminal(); i++ {
		if i > 1000 {
			return fmt.Errorf("not finished after %d reconciles: %s", i, obj.Status.Message)
		}
		var res reconcile.Result
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			next, requeue, err := runner.Reconcile(ctx, obj.Status)
			obj.Status = next
			res = reconcile.Result{RequeueAfter: requeue}
			return err
		})
		if err != nil {
			return err
		}
		clk.Advance(max(res.RequeueAfter, 10*time.Millisecond))
	}
	if obj.Status.Phase != strategy.PhaseSucceeded {
		return fmt.Errorf("rollout of %s/%s ended in phase %s: %s", obj.Namespace, obj.Name, obj.Status.Phase, obj.Status.Message)
	}
	fmt.Printf("consumer: %s event: %s/%s upgraded v1 -> v2 (%s), side %s now stable at weight %d\n",
		corev1.EventTypeNormal, obj.Namespace, obj.Name, obj.Status.Phase, obj.Status.StableSide, 100-obj.Status.Observed.Weight)
	return nil
}
