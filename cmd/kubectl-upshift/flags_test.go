package main

import (
	"flag"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
