package strategy

// extrasFit reports whether the router may be asked for extras x now: they
// put no more load on the canary than the extras it reports, or the
// canary's observed ready capacity covers their load at the larger of the
// desired and the observed weight.
func (r *run) extrasFit(x TrafficExtras) bool {
	st := r.st
	w := max(st.Desired.Weight, st.Observed.Weight)
	need := x.CanaryLoad(w)
	if need <= st.Observed.Extras.CanaryLoad(w) {
		return true
	}
	_, canary := r.e.mode.ready(r.facts())
	return need <= canary
}

// extrasAt is the extras in force at step i: the last header route and the
// last mirror at or before it, and the sticky sessions of this rollout.
func (r *run) extrasAt(i int) TrafficExtras {
	e := r.e
	var x TrafficExtras
	if e.canary {
		hdr, mir := false, false
		for j := min(i, len(e.steps)-1); j >= 0 && !(hdr && mir); j-- {
			s := &e.steps[j]
			if s.SetHeaderRoute != nil && !hdr {
				hdr = true
				if len(s.SetHeaderRoute.Matches) > 0 {
					x.HeaderRoute = s.SetHeaderRoute
				}
			}
			if s.SetMirror != nil && !mir {
				mir = true
				x.MirrorPercent = s.SetMirror.Percent
			}
		}
	}
	if e.affinity != nil {
		x.Sticky = r.sticky()
	}
	return x
}

// sticky is the session affinity of this rollout: its tickets are named by
// the canary revision and the instant the rollout started. A run already
// in force keeps its name, whatever that instant: above all one recovered
// from the route when a lost state was adopted (the route records the run
// it programs), so that no session gets a new ticket and flips sides. A
// run ends only when the rollout drops its extras (at weight 0 after a
// walk back, or at the end), so a new rollout gets a new run.
func (r *run) sticky() *Sticky {
	st := r.st
	want := Sticky{Run: runID(st.CanaryRevision, st.StartedAt), Grid: r.e.grid, Cookie: r.e.affinity.withDefaults()}
	if cur := st.DesiredExtras.Sticky; cur != nil && cur.Run != "" {
		want.Run = cur.Run
		if cur.equal(&want) {
			return cur
		}
	}
	return &want
}

// extrasTo moves the router's extras to x, in a hop of its own, once the
// canary's observed ready capacity covers the load they put on it at the
// desired weight (see TrafficExtras.CanaryLoad); in the managed mode the
// canary is first asked for that capacity, within the surge budget. Extras
// that put less load on the canary go at once. It reports whether x is in
// place.
func (r *run) extrasTo(x TrafficExtras) bool {
	st := r.st
	if st.DesiredExtras.Equal(x) {
		return true
	}
	w := st.Desired.Weight
	if need := x.CanaryLoad(w); need > st.DesiredExtras.CanaryLoad(w) {
		f := r.facts()
		if _, ready := r.e.mode.ready(f); need > ready {
			if h := r.e.mode.provide(f, need); h.kind == scaleCanary || h.kind == scaleStable {
				r.take(h, 0)
				return false
			}
			r.waitCapacity()
			st.Message = "waiting for canary ready capacity " + itoa(need) + " (the load of the header route or mirror at weight " + itoa(w) + "), " + itoa(ready) + " ready"
			return false
		}
	}
	st.DesiredExtras = *x.DeepCopy()
	r.d.Extras = true
	r.hopped()
	return false
}

// clearExtras asks the router to drop the header route and the mirror,
// keeping sticky sessions (see walkBack); it reports whether that changes
// anything.
func (r *run) clearExtras() bool {
	st := r.st
	x := TrafficExtras{Sticky: st.DesiredExtras.Sticky}
	if st.DesiredExtras.Equal(x) {
		return false
	}
	st.DesiredExtras = x
	r.d.Extras = true
	return true
}
