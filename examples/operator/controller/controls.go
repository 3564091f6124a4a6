package controller

import (
	"time"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// Commands turns the spec's controls into the commands to apply to the
// rollout, each change once: applied holds the controls already applied
// (status.appliedControls), and the returned Controls are the ones to
// record with the state the commands produce, in the same status write,
// so that a command is neither lost nor applied twice across restarts.
//
// This is the one place where the spec's controls meet the rollout: a
// declarative control type in package strategy can replace it as a whole.
func Commands(spec, applied v1alpha1.Controls) ([]rollout.Command, v1alpha1.Controls) {
	var cmds []rollout.Command
	switch {
	case spec.Paused && !applied.Paused:
		cmds = append(cmds, strategy.State.Pause)
	case !spec.Paused && applied.Paused:
		cmds = append(cmds, strategy.State.Resume)
	}
	if spec.Promote > applied.Promote {
		cmds = append(cmds, strategy.State.Promote)
	}
	if spec.PromoteFull > applied.PromoteFull {
		cmds = append(cmds, strategy.State.PromoteFull)
	}
	switch {
	case spec.Abort && !applied.Abort:
		cmds = append(cmds, func(s strategy.State, now time.Time) strategy.State {
			return s.Abort("aborted by spec.controls.abort", now)
		})
	case !spec.Abort && applied.Abort:
		cmds = append(cmds, strategy.State.Retry)
	}
	// A counter lowered by hand is recorded as it is, and commands
	// nothing.
	return cmds, spec
}
