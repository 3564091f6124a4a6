// Package gatewaytest helps tests play the part of a Gateway API
// controller against a real API server: Accept accepts one route once,
// Player accepts every new generation of a namespace's HTTPRoutes until it
// is stopped, optionally after a delay, and counts its writes.
package gatewaytest

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TB is the part of testing.TB the helpers use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Accept writes the status a gateway controller writes when it accepts a
// route: for every parentRef, Accepted and ResolvedRefs True for the
// route's current generation. kind is "HTTPRoute" or "GRPCRoute".
func Accept(tb TB, c client.Client, kind, namespace, name string) {
	tb.Helper()
	ctx := context.Background()
	for attempt := 0; attempt < 20; attempt++ {
		var obj client.Object = &gwv1.HTTPRoute{}
		if kind == "GRPCRoute" {
			obj = &gwv1.GRPCRoute{}
		}
		if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, obj); err != nil {
			tb.Fatalf("gatewaytest: reading %s %s/%s: %v", kind, namespace, name, err)
			return
		}
		var parents []gwv1.ParentReference
		var status *gwv1.RouteStatus
		switch o := obj.(type) {
		case *gwv1.HTTPRoute:
			parents, status = o.Spec.ParentRefs, &o.Status.RouteStatus
		case *gwv1.GRPCRoute:
			parents, status = o.Spec.ParentRefs, &o.Status.RouteStatus
		}
		status.Parents = nil
		for _, p := range parents {
			ps := gwv1.RouteParentStatus{ParentRef: p, ControllerName: "example.com/gateway"}
			for _, ct := range []string{"Accepted", "ResolvedRefs"} {
				ps.Conditions = append(ps.Conditions, metav1.Condition{Type: ct, Status: metav1.ConditionTrue, Reason: ct,
					ObservedGeneration: obj.GetGeneration(), LastTransitionTime: metav1.Now()})
			}
			status.Parents = append(status.Parents, ps)
		}
		err := c.Status().Update(ctx, obj)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			tb.Fatalf("gatewaytest: writing the status of %s %s/%s: %v", kind, namespace, name, err)
			return
		}
	}
	tb.Fatalf("gatewaytest: too many conflicts writing the status of %s %s/%s", kind, namespace, name)
}
