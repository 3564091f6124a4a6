//go:build race

package main_test

// raceEnabled: the test is built with -race, so the operator is too.
const raceEnabled = true
