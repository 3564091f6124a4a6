package gateway

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/rollout"
)

// racingRoutes serves one HTTPRoute and loses the first conflicts updates
// (all of them when conflicts < 0) to another writer.
type racingRoutes struct {
	conflicts     int
	gets, updates int
	onUpdate      func()
	wrote         *gwv1.HTTPRoute
}

func (r *racingRoutes) get(context.Context, RouteRef) (route, error) {
	r.gets++
	rt := &gwv1.HTTPRoute{}
	rt.Name, rt.Namespace = "web", "shop"
	return route{http: rt}, nil
}

func (r *racingRoutes) update(_ context.Context, rt route) error {
	r.updates++
	if r.onUpdate != nil {
		r.onUpdate()
	}
	if r.conflicts != 0 {
		r.conflicts--
		return apierrors.NewConflict(schema.GroupResource{Group: gwv1.GroupName, Resource: "httproutes"}, "web",
			errors.New("the object has been modified"))
	}
	r.wrote = rt.http
	return nil
}

func (r *racingRoutes) watch(context.Context, RouteRef, metav1.ListOptions) (watch.Interface, error) {
	return nil, errNoWatch
}

func TestUpdateRouteConflicts(t *testing.T) {
	ref := RouteRef{Namespace: "shop", Name: "web"}
	annotate := func(rt route) (bool, error) {
		rt.meta().Annotations = map[string]string{"k": "v"}
		return true, nil
	}
	ctx := context.Background()

	t.Run("retried until the write lands", func(t *testing.T) {
		api := &racingRoutes{conflicts: 2}
		if err := updateRoute(ctx, api, ref, 5, annotate); err != nil {
			t.Fatal(err)
		}
		if api.gets != 3 || api.updates != 3 || api.wrote.Annotations["k"] != "v" {
			t.Fatalf("%d reads, %d writes, wrote %v; want 3, 3 and the annotation", api.gets, api.updates, api.wrote)
		}
	})
	t.Run("conflicts that outlast the retries", func(t *testing.T) {
		api := &racingRoutes{conflicts: -1}
		err := updateRoute(ctx, api, ref, 3, annotate)
		if !errors.Is(err, rollout.ErrConflict) || !apierrors.IsConflict(err) || rollout.IsPermanent(err) {
			t.Fatalf("err %v: want rollout.ErrConflict, an API conflict, not permanent", err)
		}
		if api.updates != 4 {
			t.Fatalf("%d writes, want 1 + 3 retries", api.updates)
		}
	})
	t.Run("ctx ends between attempts", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		api := &racingRoutes{conflicts: -1, onUpdate: cancel}
		err := updateRoute(ctx, api, ref, 5, annotate)
		if !errors.Is(err, context.Canceled) || errors.Is(err, rollout.ErrConflict) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
		if api.gets != 1 {
			t.Fatalf("%d reads after ctx ended, want none", api.gets-1)
		}
	})
	t.Run("nothing to change", func(t *testing.T) {
		api := &racingRoutes{}
		if err := updateRoute(ctx, api, ref, 5, func(route) (bool, error) { return false, nil }); err != nil || api.updates != 0 {
			t.Fatalf("err %v, %d writes; want no write", err, api.updates)
		}
	})
}

func (r *racingRoutes) list(context.Context, string, string) ([]route, error) { return nil, nil }
