package fake

import (
	"context"

	"github.com/upshift-dev/upshift/rollout"
)

// RouterFuncs intercepts a TrafficRouter's calls. Each func receives the
// wrapped router, so it can fail, delay, alter or pass the call on. A nil
// func passes the call through, so the zero value intercepts nothing. The
// wrapper is as safe for concurrent use as the wrapped router and the funcs.
//
// SetRoutes and Routes intercept a rollout.ExtrasRouter's calls; they are
// used only when the wrapped router is one. Without them, SetWeights and
// Weights see the weights of those calls too: a SetRoutes call goes
// through SetWeights (its next writes the weights it is given with the
// call's extras, in one SetRoutes), and a Routes call through Weights (its
// next reads Routes; the extras read are reported with the status
// Weights returns). So a weights interceptor sees every weight a Runner
// writes and reads, whichever of the calls it uses.
type RouterFuncs struct {
	SetWeights func(ctx context.Context, next rollout.TrafficRouter, w rollout.Weights) error
	Weights    func(ctx context.Context, next rollout.TrafficRouter) (rollout.RouteStatus, error)
	SetRoutes  func(ctx context.Context, next rollout.ExtrasRouter, r rollout.Routes) error
	Routes     func(ctx context.Context, next rollout.ExtrasRouter) (rollout.RoutesStatus, error)
}

// InterceptRouter wraps next with funcs. When next is a rollout.ExtrasRouter
// (as a Router is) the wrapper is one too.
func InterceptRouter(next rollout.TrafficRouter, funcs RouterFuncs) rollout.TrafficRouter {
	if rs, ok := next.(rollout.ExtrasRouter); ok {
		return &interceptedExtrasRouter{interceptedRouter{next: next, f: funcs}, rs}
	}
	return &interceptedRouter{next: next, f: funcs}
}

type interceptedExtrasRouter struct {
	interceptedRouter
	extras rollout.ExtrasRouter
}

func (r *interceptedExtrasRouter) SetRoutes(ctx context.Context, rt rollout.Routes) error {
	switch {
	case r.f.SetRoutes != nil:
		return r.f.SetRoutes(ctx, r.extras, rt)
	case r.f.SetWeights != nil:
		return r.f.SetWeights(ctx, &routesVia{ExtrasRouter: r.extras, write: rt}, rt.Weights)
	}
	return r.extras.SetRoutes(ctx, rt)
}

func (r *interceptedExtrasRouter) Routes(ctx context.Context) (rollout.RoutesStatus, error) {
	switch {
	case r.f.Routes != nil:
		return r.f.Routes(ctx, r.extras)
	case r.f.Weights != nil:
		via := &routesVia{ExtrasRouter: r.extras}
		st, err := r.f.Weights(ctx, via)
		return rollout.RoutesStatus{RouteStatus: st, Canary: via.read.Canary, Extras: via.read.Extras}, err
	}
	return r.extras.Routes(ctx)
}

// routesVia is the next router a weights interceptor gets for a SetRoutes
// or Routes call: SetWeights writes the weights with the call's extras,
// Weights reads Routes and keeps what it read.
type routesVia struct {
	rollout.ExtrasRouter
	write rollout.Routes
	read  rollout.RoutesStatus
}

func (v *routesVia) SetWeights(ctx context.Context, w rollout.Weights) error {
	rt := v.write
	rt.Weights = w
	return v.ExtrasRouter.SetRoutes(ctx, rt)
}

func (v *routesVia) Weights(ctx context.Context) (rollout.RouteStatus, error) {
	st, err := v.ExtrasRouter.Routes(ctx)
	v.read = st
	return st.RouteStatus, err
}

type interceptedRouter struct {
	next rollout.TrafficRouter
	f    RouterFuncs
}

func (r *interceptedRouter) SetWeights(ctx context.Context, w rollout.Weights) error {
	if r.f.SetWeights != nil {
		return r.f.SetWeights(ctx, r.next, w)
	}
	return r.next.SetWeights(ctx, w)
}

func (r *interceptedRouter) Weights(ctx context.Context) (rollout.RouteStatus, error) {
	if r.f.Weights != nil {
		return r.f.Weights(ctx, r.next)
	}
	return r.next.Weights(ctx)
}

// CapacityFuncs intercepts a CapacitySetter's calls, like RouterFuncs: the
// zero value intercepts nothing.
type CapacityFuncs struct {
	SetCapacity func(ctx context.Context, next rollout.CapacitySetter, r rollout.CapacityRequest) error
	Capacity    func(ctx context.Context, next rollout.CapacitySetter) (rollout.CapacityStatus, error)
}

// InterceptCapacity wraps next with funcs.
func InterceptCapacity(next rollout.CapacitySetter, funcs CapacityFuncs) rollout.CapacitySetter {
	return &interceptedCapacity{next: next, f: funcs}
}

type interceptedCapacity struct {
	next rollout.CapacitySetter
	f    CapacityFuncs
}

func (c *interceptedCapacity) SetCapacity(ctx context.Context, r rollout.CapacityRequest) error {
	if c.f.SetCapacity != nil {
		return c.f.SetCapacity(ctx, c.next, r)
	}
	return c.next.SetCapacity(ctx, r)
}

func (c *interceptedCapacity) Capacity(ctx context.Context) (rollout.CapacityStatus, error) {
	if c.f.Capacity != nil {
		return c.f.Capacity(ctx, c.next)
	}
	return c.next.Capacity(ctx)
}
