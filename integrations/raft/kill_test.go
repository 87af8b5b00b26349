package raftkdb

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
)

// killOpts is the store of TestStore_KillDuringWrites: small segments, so
// that its StoreLogs and DeleteRange calls split.
func killOpts() *kdb.Options {
	return &kdb.Options{SegmentSize: 64 << 10, CheckpointBytes: 256 << 10}
}

// killChild is the child process of TestStore_KillDuringWrites: it writes
// to the store in dir until it is killed, printing "begin" before each call
// and "ack" once it returned, with what the call does:
// "S lo hi term" (StoreLogs of lo..hi) or "D lo hi" (DeleteRange).
func killChild(dir string, seed uint64) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	s, err := Open(dir, killOpts())
	if err != nil {
		fail(err)
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	var term uint64 = 1
	if last > 0 {
		var l raft.Log
		if err := s.GetLog(last, &l); err != nil {
			fail(err)
		}
		term = l.Term + 1
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	say := func(s string) {
		if _, err := os.Stdout.WriteString(s + "\n"); err != nil {
			os.Exit(4)
		}
	}
	for {
		var op string
		var call func() error
		switch r := rng.IntN(10); {
		case r < 2 && last-first > 1000: // compaction after a snapshot
			hi := first + uint64(rng.IntN(int(last-first)-100))
			lo := first
			op, call = fmt.Sprintf("D %d %d", lo, hi), func() error { return s.DeleteRange(lo, hi) }
			first = hi + 1
		case r < 4 && last-first > 100: // a follower truncating a conflicting suffix
			lo := last - uint64(rng.IntN(int(last-first)/2))
			hi := last
			op, call = fmt.Sprintf("D %d %d", lo, hi), func() error { return s.DeleteRange(lo, hi) }
			last = lo - 1
			term++
		default:
			n := 1 + rng.IntN(3000)
			if rng.IntN(2) == 0 {
				n = 1 + rng.IntN(20)
			}
			lo := last + 1
			if last == 0 {
				lo, first = 1, 1
			}
			hi := lo + uint64(n) - 1
			var logs []*raft.Log
			for i := lo; i <= hi; i++ {
				logs = append(logs, entry(i, term, 20+int(i%7)*100))
			}
			op, call = fmt.Sprintf("S %d %d %d", lo, hi, term), func() error { return s.StoreLogs(logs) }
			last = hi
		}
		say("begin " + op)
		if err := call(); err != nil {
			fail(err)
		}
		say("ack " + op)
	}
}

// bigCall reports whether a "begin" line is a call that splits: a
// DeleteRange, or a StoreLogs of more than 500 entries.
func bigCall(line string) bool {
	f := strings.Fields(line)
	if len(f) < 4 {
		return false
	}
	lo, _ := strconv.ParseUint(f[2], 10, 64)
	hi, _ := strconv.ParseUint(f[3], 10, 64)
	return f[1] == "D" || hi-lo > 500
}

// applyOp applies one "S lo hi term" or "D lo hi" line to m.
func applyOp(t *testing.T, m state, line string) {
	t.Helper()
	f := strings.Fields(line)
	num := func(i int) uint64 {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			t.Fatalf("child said %q: %v", line, err)
		}
		return v
	}
	lo, hi := num(1), num(2)
	for i := lo; i <= hi; i++ {
		if f[0] == "S" {
			m[i] = num(3)
		} else {
			delete(m, i)
		}
	}
}

// TestStore_KillDuringWrites SIGKILLs a child process writing to a store
// on disk (StoreLogs and DeleteRange calls large enough to split into
// several kdb batches) at random moments, right after it began a call, and
// reopens the store each time: the log is contiguous, every call that
// returned nil is there, and nothing is there that neither the
// acknowledged state nor the call in flight could have left. A process
// kill keeps the page cache (TestStore_PowerLoss is the power-loss test);
// this one runs the real file system and a real process's death.
func TestStore_KillDuringWrites(t *testing.T) {
	if dir := os.Getenv("RAFTKDB_KILL_CHILD"); dir != "" {
		seed, _ := strconv.ParseUint(os.Getenv("RAFTKDB_KILL_SEED"), 10, 64)
		killChild(dir, seed)
		return
	}
	dir := t.TempDir()
	rounds := 12
	if testing.Short() {
		rounds = 5
	}
	rng := rand.New(rand.NewPCG(1, 2))
	acked := state{}
	for round := 0; round < rounds; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStore_KillDuringWrites$")
		cmd.Env = append(os.Environ(), "RAFTKDB_KILL_CHILD="+dir, fmt.Sprintf("RAFTKDB_KILL_SEED=%d", round))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAfter := 3 + rng.IntN(25) // acknowledged calls before the kill
		inFlight := acked.clone()
		sc := bufio.NewScanner(out)
		acks, killed := 0, false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "begin "):
				inFlight = acked.clone()
				applyOp(t, inFlight, strings.TrimPrefix(line, "begin "))
				if acks >= killAfter && !killed && bigCall(line) {
					// Mid-call, mostly: the child is inside StoreLogs or
					// DeleteRange (or about to enter it, or out of it).
					// Where the kill lands only changes what the round
					// covers, not what it checks.
					time.Sleep(time.Duration(rng.IntN(4000)) * time.Microsecond)
					if err := cmd.Process.Kill(); err != nil {
						t.Fatal(err)
					}
					killed = true
				}
			case strings.HasPrefix(line, "ack "):
				applyOp(t, acked, strings.TrimPrefix(line, "ack "))
				acks++
			}
		}
		werr := cmd.Wait()
		if !killed {
			t.Fatalf("round %d: the child stopped by itself after %d calls: %v\n%s", round, acks, werr, stderr.String())
		}
		// The acknowledged state is a, the one with the call in flight b.
		s, err := Open(dir, killOpts())
		if err != nil {
			t.Fatalf("round %d: reopen after the kill: %v", round, err)
		}
		f, l := bounds(t, s)
		got := state{}
		for i := f; i <= l && l > 0; i++ {
			var e raft.Log
			if err := s.GetLog(i, &e); err != nil {
				t.Fatalf("round %d: log %d..%d has a hole at %d: %v", round, f, l, i, err)
			}
			if want := entry(i, e.Term, 20+int(i%7)*100); string(e.Data) != string(want.Data) {
				t.Fatalf("round %d: entry %d: wrong data", round, i)
			}
			got[i] = e.Term
		}
		for i, term := range acked {
			if bt, ok := inFlight[i]; ok && bt == term {
				if gt, ok := got[i]; !ok || gt != term {
					t.Fatalf("round %d: acknowledged entry %d (term %d) missing or changed (%v, term %d)", round, i, term, ok, gt)
				}
			}
		}
		for i, term := range got {
			if acked[i] != term && inFlight[i] != term {
				t.Fatalf("round %d: entry %d term %d is in neither the acknowledged state nor the one in flight", round, i, term)
			}
		}
		if _, err := s.DB().Check(); err != nil {
			t.Fatalf("round %d: kdb Check: %v", round, err)
		}
		where := "mid-call"
		if sameState(got, acked) {
			where = "before the call's write"
		} else if sameState(got, inFlight) {
			where = "after the call's write"
		}
		t.Logf("round %d: killed after %d calls, %s; log %d..%d", round, acks, where, f, l)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		acked = got // the next child starts from what survived
	}
}

func sameState(a, b state) bool {
	if len(a) != len(b) {
		return false
	}
	for i, t := range a {
		if bt, ok := b[i]; !ok || bt != t {
			return false
		}
	}
	return true
}
