package measure

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"
)

// TicksPerSecond is the unit of the CPU times in /proc: USER_HZ on Linux.
const TicksPerSecond = 100

// CPUSample is the CPU time, in clock ticks, of the machine and of some
// processes at one instant, from /proc. On systems without /proc every
// figure is 0. The zero value is an empty sample.
type CPUSample struct {
	// Busy is the machine's busy time, all cores: every state of the
	// first line of /proc/stat but idle and iowait.
	Busy int64
	// Cores is the number of cores /proc/stat lists.
	Cores int
	// Ours is the user and system time of this process and of all its
	// children.
	Ours int64
	// Procs is the user and system time by process: "test" (this
	// process), the named processes SampleCPU was given, and
	// "kube-apiserver" and "etcd" (children of this process; the sum if
	// several).
	Procs map[string]int64
	// At is when the sample was taken.
	At time.Time
}

// SampleCPU reads the CPU times of the machine, of this process, of its
// children, and of the processes named in named (name -> pid), which must
// not be "test", "kube-apiserver" or "etcd". SampleCPU is safe for
// concurrent use.
func SampleCPU(named map[string]int) CPUSample {
	s := CPUSample{At: time.Now(), Procs: map[string]int64{}}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		for i, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			switch {
			case i == 0 && len(f) > 1 && f[0] == "cpu":
				for j, v := range f[1:] {
					if j == 3 || j == 4 { // idle, iowait
						continue
					}
					n, _ := strconv.ParseInt(v, 10, 64)
					s.Busy += n
				}
			case len(f) > 0 && strings.HasPrefix(f[0], "cpu"):
				s.Cores++
			}
		}
	}
	self := os.Getpid()
	_, _, s.Ours = ProcStat(self)
	s.Procs["test"] = s.Ours
	isNamed := map[int]bool{}
	for name, pid := range named {
		_, _, s.Procs[name] = ProcStat(pid)
		isNamed[pid] = true
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		ppid, comm, ticks := ProcStat(pid)
		if ppid != self {
			continue
		}
		s.Ours += ticks
		if !isNamed[pid] && (comm == "kube-apiserver" || comm == "etcd") {
			s.Procs[comm] += ticks
		}
	}
	return s
}

// CPUUse returns the cores busy on average from a to b: all of them, and
// those of this process and its children (Ours). It returns 0, 0 unless b
// was taken after a.
func CPUUse(a, b CPUSample) (all, ours float64) {
	secs := b.At.Sub(a.At).Seconds()
	if secs <= 0 {
		return 0, 0
	}
	return float64(b.Busy-a.Busy) / TicksPerSecond / secs, float64(b.Ours-a.Ours) / TicksPerSecond / secs
}

// ProcStat returns a process's parent, its command name and its user +
// system time in clock ticks, from /proc/<pid>/stat; zeros and "" when it
// cannot be read.
func ProcStat(pid int) (ppid int, comm string, ticks int64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", 0
	}
	return parseStat(b)
}

func parseStat(b []byte) (ppid int, comm string, ticks int64) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return 0, "", 0
	}
	comm = string(b[open+1 : end])
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 13 {
		return 0, "", 0
	}
	ppid, _ = strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ppid, comm, ut + st
}
