package rollout

import (
	"context"
	"errors"

	"github.com/upshift-dev/upshift/strategy"
)

// ErrUnsupported is matched by the error of an ExtrasRouter asked for an extra
// its data plane does not offer (a mirror on a gateway without request
// mirroring, sticky sessions on a route kind that cannot set a cookie). The
// error names the feature and is marked Permanent: nothing is written.
var ErrUnsupported = errors.New("rollout: unsupported")

// Routes is what an ExtrasRouter programs in one update: the weights, and the
// extras (a header route, a mirror, sticky sessions) pointed at the canary's
// physical side. With sticky sessions the canary's weight is also the
// sessions' threshold: a ticket at most Weights.Of(Canary) goes to the
// canary.
type Routes struct {
	Weights Weights
	// The physical side the extras send to; the other side is the stable.
	Canary strategy.Side
	// What to program beside the weights; the zero value removes every
	// extra.
	Extras strategy.TrafficExtras
}

// RoutesStatus is what an ExtrasRouter reports: the route's weights and
// acceptance, and the extras programmed.
type RoutesStatus struct {
	RouteStatus
	// The physical side the programmed extras send to; empty when none are
	// programmed.
	Canary strategy.Side
	// The extras as read back from the data plane's configuration; the zero
	// value when none are (or another writer removed them). They count as
	// applied once Accepted.
	Extras strategy.TrafficExtras
}

// ExtrasRouter is a TrafficRouter that also programs the extras of a canary:
// header routes, mirrored requests and sticky sessions. The Runner uses it
// instead of SetWeights whenever the state holds extras or the router
// reports some, so weights and extras always travel in one update.
// Implementations are idempotent and safe for concurrent use; SetRoutes
// returns an error matching ErrUnsupported (Permanent) for an extra the data
// plane does not offer, before writing anything.
type ExtrasRouter interface {
	TrafficRouter
	SetRoutes(ctx context.Context, r Routes) error
	Routes(ctx context.Context) (RoutesStatus, error)
}

// RouteShaper is ExtrasRouter under its former name.
//
// Deprecated: use ExtrasRouter.
type RouteShaper = ExtrasRouter
