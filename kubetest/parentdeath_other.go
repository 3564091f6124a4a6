//go:build !linux

package kubetest

import "errors"

const parentDeathSupported = false

func execWithParentDeathSignal(string, []string) error {
	return errors.New("parent-death signal not supported on this platform")
}
