package fake

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// Extra names one kind of traffic extra a Router programs, for
// Router.Unsupported. It is a plain string; the zero value names none.
type Extra string

// The extras of strategy.TrafficExtras.
const (
	ExtraHeaderRoute Extra = "header route"
	ExtraMirror      Extra = "mirror"
	ExtraSticky      Extra = "sticky sessions"
)

// programmed is the extras of a route and the side they send to; the zero
// value programs none.
type programmed struct {
	canary strategy.Side
	extras strategy.TrafficExtras
}

// programmedOf returns what r programs beside its weights: a deep copy of
// its extras (an empty header route dropped), and no side when there are
// none.
func programmedOf(r rollout.Routes) programmed {
	if r.Extras.IsZero() {
		return programmed{}
	}
	x := *r.Extras.DeepCopy()
	if x.HeaderRoute != nil && len(x.HeaderRoute.Matches) == 0 {
		x.HeaderRoute = nil
	}
	return programmed{canary: r.Canary, extras: x}
}

func (p programmed) equal(o programmed) bool {
	return p.canary == o.canary && p.extras.Equal(o.extras)
}

// kinds lists the extras p programs.
func (p programmed) kinds() []Extra {
	var ks []Extra
	if p.extras.HeaderRoute != nil {
		ks = append(ks, ExtraHeaderRoute)
	}
	if p.extras.MirrorPercent != 0 {
		ks = append(ks, ExtraMirror)
	}
	if p.extras.Sticky != nil {
		ks = append(ks, ExtraSticky)
	}
	return ks
}

// SetRoutes writes the weights and the extras into the route's spec, in one
// update: the data plane takes both after the Lag, as for SetWeights (with
// Reject, Conflicts, FailWith, Delete and claims alike). Writing what the
// spec holds already changes nothing. The zero Extras removes every extra.
//
// It refuses, before writing anything and with a Permanent error: weights
// that are negative or do not sum to 100; extras that are not well formed
// (rollout.ErrInvalid, naming the field: Routes.Canary must be A or B
// beside extras, Routes.Extras.MirrorPercent 0..100, each header match a
// name, a known type and, for RegularExpression, an RE2 expression, a
// sticky Run and a Grid ascending within 1..100, ending in 100, at most 16
// values); an extra set by Unsupported (rollout.ErrUnsupported, naming it).
// The call is kept in History with a copy of r (Call.Routes).
func (r *Router) SetRoutes(ctx context.Context, rt rollout.Routes) error {
	return r.setRoutes(ctx, rt, nil)
}

// setRoutes is SetRoutes, writing the state st (JSON) in the same update
// when it is not nil.
func (r *Router) setRoutes(ctx context.Context, rt rollout.Routes, st []byte) error {
	defer r.note.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	asked := rollout.Routes{Weights: rt.Weights, Canary: rt.Canary, Extras: *rt.Extras.DeepCopy()}
	arg := routesText(rt)
	record := func(err error) error {
		r.hist.add(r.clock, "SetRoutes", arg, err)
		r.hist.routes(&asked)
		r.hist.owned(ctx)
		return err
	}
	if err := ctx.Err(); err != nil {
		return record(err)
	}
	if r.err != nil {
		return record(r.err)
	}
	if r.deleted {
		return record(fmt.Errorf("fake router: route: %w", rollout.ErrNotFound))
	}
	if err := r.claim.check(ctx); err != nil {
		return record(err)
	}
	w := rt.Weights
	if w.A < 0 || w.B < 0 || w.A+w.B != 100 {
		return record(rollout.Permanent(fmt.Errorf("fake router: weights A=%d B=%d must be non-negative and sum to 100", w.A, w.B)))
	}
	if err := validRoutes(rt); err != nil {
		return record(rollout.Permanent(err))
	}
	want := programmedOf(rt)
	for _, k := range want.kinds() {
		if r.refused[k] {
			return record(rollout.Permanent(fmt.Errorf("fake router: %s: the data plane does not offer it: %w", k, rollout.ErrUnsupported)))
		}
	}
	if err := r.fits(st); err != nil {
		return record(err)
	}
	if r.conflict > 0 {
		r.conflict--
		return record(fmt.Errorf("fake router: %w", rollout.ErrConflict))
	}
	record(nil)
	if st != nil {
		r.state = st
		r.stateWrites++
	}
	if w == r.spec && want.equal(r.extras) {
		return nil
	}
	r.writeRoutes(w, want)
	return nil
}

// validRoutes reports every problem with r's extras, each naming its field
// and matching rollout.ErrInvalid.
func validRoutes(r rollout.Routes) error {
	x := r.Extras
	if x.IsZero() {
		return nil
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w fake router: "+format, append([]any{rollout.ErrInvalid}, args...)...))
	}
	if r.Canary != strategy.SideA && r.Canary != strategy.SideB {
		bad("Routes.Canary %q: must be A or B beside extras", r.Canary)
	}
	if x.MirrorPercent < 0 || x.MirrorPercent > 100 {
		bad("Routes.Extras.MirrorPercent %d: must be 0..100", x.MirrorPercent)
	}
	if h := x.HeaderRoute; h != nil {
		for i, m := range h.Matches {
			p := fmt.Sprintf("Routes.Extras.HeaderRoute.Matches[%d]", i)
			if m.Name == "" {
				bad("%s.Name: required", p)
			}
			switch m.Type {
			case "", strategy.HeaderExact, strategy.HeaderCookie:
			case strategy.HeaderRegularExpression:
				if _, err := regexp.Compile(m.Value); err != nil {
					bad("%s.Value %q: not an RE2 regular expression: %v", p, m.Value, err)
				}
			default:
				bad("%s.Type %q: must be Exact, RegularExpression or Cookie", p, m.Type)
			}
		}
		if h.ExpectedPercent != nil && (*h.ExpectedPercent < 0 || *h.ExpectedPercent > 100) {
			bad("Routes.Extras.HeaderRoute.ExpectedPercent %d: must be 0..100", *h.ExpectedPercent)
		}
	}
	if s := x.Sticky; s != nil {
		if s.Run == "" || strings.ContainsAny(s.Run, " ;,\".") {
			bad("Routes.Extras.Sticky.Run %q: required, a cookie value without dots", s.Run)
		}
		if !validGrid(s.Grid) {
			bad("Routes.Extras.Sticky.Grid %v: must ascend within 1..100, end in 100 and hold at most 16 values", s.Grid)
		}
	}
	return errors.Join(errs...)
}

func validGrid(g []int32) bool {
	if len(g) == 0 || len(g) > 16 || g[len(g)-1] != 100 {
		return false
	}
	prev := int32(0)
	for _, v := range g {
		if v <= prev {
			return false
		}
		prev = v
	}
	return true
}

// routesText renders r for a Call: "A=90 B=10 canary B: header
// x-beta=1 (5%), mirror 20%, sticky 3f2a1b0c grid 10,20,100".
func routesText(r rollout.Routes) string {
	s := fmt.Sprintf("A=%d B=%d", r.Weights.A, r.Weights.B)
	if r.Extras.IsZero() {
		return s
	}
	return s + fmt.Sprintf(" canary %s: %s", r.Canary, extrasText(r.Extras))
}

// extrasText renders extras for a Call: "header x-beta=1 (5%)", "mirror
// 20%", "sticky 3f2a1b0c grid 10,20,50,100", joined by ", "; "none" for
// the zero value. A header route without ExpectedPercent shows "(share
// unknown)".
func extrasText(x strategy.TrafficExtras) string {
	var parts []string
	if h := x.HeaderRoute; h != nil && len(h.Matches) > 0 {
		ms := make([]string, len(h.Matches))
		for i, m := range h.Matches {
			switch m.Type {
			case strategy.HeaderRegularExpression:
				ms[i] = m.Name + "~" + m.Value
			case strategy.HeaderCookie:
				ms[i] = "cookie " + m.Name + "=" + m.Value
			default:
				ms[i] = m.Name + "=" + m.Value
			}
		}
		share := "share unknown"
		if h.ExpectedPercent != nil {
			share = strconv.Itoa(int(*h.ExpectedPercent)) + "%"
		}
		parts = append(parts, fmt.Sprintf("header %s (%s)", strings.Join(ms, " & "), share))
	}
	if x.MirrorPercent != 0 {
		parts = append(parts, fmt.Sprintf("mirror %d%%", x.MirrorPercent))
	}
	if s := x.Sticky; s != nil {
		g := make([]string, len(s.Grid))
		for i, v := range s.Grid {
			g[i] = strconv.Itoa(int(v))
		}
		parts = append(parts, fmt.Sprintf("sticky %s grid %s", s.Run, strings.Join(g, ",")))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Routes reports the route's weights and acceptance, as Weights does (and
// counting one observation for the Lag), with the extras the spec holds and
// the side they send to: none once DropExtras, Create or Delete removed
// them.
func (r *Router) Routes(ctx context.Context) (rollout.RoutesStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := ctx.Err(); err != nil {
		r.hist.add(r.clock, "Routes", "", err)
		return rollout.RoutesStatus{}, err
	}
	_, err := r.status()
	r.hist.add(r.clock, "Routes", "", err)
	if err != nil {
		return rollout.RoutesStatus{}, err
	}
	if r.change != nil {
		r.change.reads--
	}
	st, err := r.status()
	if err != nil {
		return rollout.RoutesStatus{}, err
	}
	return rollout.RoutesStatus{RouteStatus: st, Canary: r.extras.canary, Extras: *r.extras.extras.DeepCopy()}, nil
}

// AppliedRoutes returns what the data plane routes by now: the weights (as
// Applied), and the extras with the side they send to.
func (r *Router) AppliedRoutes() rollout.Routes {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settle()
	return rollout.Routes{Weights: r.applied, Canary: r.live.canary, Extras: *r.live.extras.DeepCopy()}
}

// DropExtras is another writer re-applying the route without the extras, as
// a GitOps tool restoring the route it holds does: the spec keeps its
// weights and loses every extra at once (Routes reports none), and the data
// plane routes without them after the Lag. A route without extras is left
// as it is.
func (r *Router) DropExtras() {
	defer r.note.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.deleted || r.extras.extras.IsZero() {
		return
	}
	r.writeRoutes(r.spec, programmed{})
}

// writeRoutes puts w and x into the spec; the data plane takes them after
// the lag.
func (r *Router) writeRoutes(w rollout.Weights, x programmed) {
	r.settle() // a change whose lag is over was applied before this one
	r.extras = x
	r.write(w)
}

// Unsupported makes the data plane refuse the extras named, as a gateway
// without request mirroring refuses a mirror: a later SetRoutes that asks
// for one fails with an error matching rollout.ErrUnsupported and naming
// it, marked Permanent, and writes nothing. Unsupported() with no
// argument offers every extra again. Extras already programmed stay.
func (r *Router) Unsupported(extras ...Extra) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refused = map[Extra]bool{}
	for _, e := range extras {
		r.refused[e] = true
	}
}

// routes keeps a copy of the routes asked for on the last call of h.
func (h *history) routes(r *rollout.Routes) {
	if h.off || len(h.calls) == 0 {
		return
	}
	h.calls[len(h.calls)-1].Routes = r
}

// loadOf is the share of requests (0..100) side receives by weights w and
// the extras p: its weights' share, and for the canary of p its load with
// the extras (strategy.TrafficExtras.CanaryLoad: a header route counted
// at its ExpectedPercent, all requests when unset, and the mirrored copies).
func loadOf(w rollout.Weights, p programmed, side strategy.Side) int32 {
	share := shareOf(w, side)
	if p.extras.IsZero() || side != p.canary || w.A+w.B <= 0 {
		return share
	}
	return max(share, p.extras.CanaryLoad(share))
}
