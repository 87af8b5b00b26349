package kdb_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// The kill test runs the test binary again as a child process that writes
// to a store on the real file system and reports each operation on stdout:
//
//	O                          the child calls Open (recovery begins)
//	R                          the store is open; writes begin
//	B <g> <seq> <op> [<op>...] writer g starts its batch seq
//	A <g> <seq>                the batch returned nil: it is acknowledged
//	E <message>                a call failed; the child exits
//
// where an op is P:<key>:<len>:<seed> (put the value killValue(seed, len))
// or D:<key> (delete). Each writer has its own keys and one batch in flight
// at a time, so the latest acknowledged op of each key is well defined, and
// a batch begun but not acknowledged at the kill may be wholly there or
// wholly absent. Each line is one write(2) of less than PIPE_BUF bytes to a
// pipe, so lines written before the kill are whole and in order.
const (
	killEnvDir   = "KDB_KILL_CHILD_DIR"
	killEnvSeed  = "KDB_KILL_CHILD_SEED"
	killIndex    = "kill"
	killWriters  = 4
	killKeySpace = 150 // keys per writer
	// killOpenPause is the child's pause before each file operation of its
	// Open (see TestKill_Child).
	killOpenPause = 100 * time.Microsecond
)

// killOptions makes journal rotation, background checkpoints and journal GC
// happen within the few tens of milliseconds a child lives.
func killOptions() *kdb.Options {
	return &kdb.Options{
		FS:                   vfs.OS,
		SegmentSize:          128 << 10,
		CheckpointBytes:      128 << 10,
		CheckpointInterval:   20 * time.Millisecond,
		CheckpointDirtyPages: 64,
	}
}

// killValue is the value a P op names.
func killValue(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x6b696c6c))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		u := r.Uint64()
		for j := i; j < min(i+8, n); j++ {
			b[j] = byte(u)
			u >>= 8
		}
	}
	return b
}

// TestKill_Child is the child of TestKill_RandomMoments; it does nothing
// unless KDB_KILL_CHILD_DIR is set. It writes until it is killed.
func TestKill_Child(t *testing.T) {
	dir := os.Getenv(killEnvDir)
	if dir == "" {
		return
	}
	seed, _ := strconv.ParseUint(os.Getenv(killEnvSeed), 10, 64)
	var mu sync.Mutex
	emit := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		// One write per line, unbuffered: it is in the pipe on return.
		if _, err := os.Stdout.WriteString(line + "\n"); err != nil {
			os.Exit(5)
		}
	}
	die := func(format string, args ...any) {
		emit("E " + strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", " "))
		os.Exit(3)
	}
	// Open is stretched: a pause before each of its file operations makes
	// the recovery last tens of milliseconds, so the kills the parent aims
	// inside it land there (and between its steps) on a fast machine too,
	// where a whole Open takes about as long as the parent takes to see "O".
	var opening atomic.Bool
	opening.Store(true)
	opts := killOptions()
	opts.FS = vfs.Intercept(vfs.OS, func(vfs.Event) error {
		if opening.Load() {
			time.Sleep(killOpenPause)
		}
		return nil
	})
	emit("O")
	db, err := kdb.Open(dir, opts)
	opening.Store(false)
	if err != nil {
		die("open: %v", err)
	}
	emit("R")
	// Explicit checkpoints too, so that kills land in their I/O.
	go func() {
		r := rand.New(rand.NewPCG(seed, 99))
		for {
			time.Sleep(time.Duration(1+r.IntN(8)) * time.Millisecond)
			if err := db.Checkpoint(); err != nil {
				die("checkpoint: %v", err)
			}
		}
	}()
	for g := range killWriters {
		go func() {
			r := rand.New(rand.NewPCG(seed, uint64(g)))
			var line strings.Builder
			for seq := 0; ; seq++ {
				nops := 1
				if r.IntN(100) < 40 {
					nops = 2 + r.IntN(4)
				}
				line.Reset()
				fmt.Fprintf(&line, "B %d %d", g, seq)
				b := kdb.NewBatch()
				used := map[int]bool{}
				var single func() error
				for i := 0; i < nops; i++ {
					k := r.IntN(killKeySpace)
					if used[k] {
						continue
					}
					used[k] = true
					key := fmt.Sprintf("g%d-%03d", g, k)
					if r.IntN(100) < 15 {
						fmt.Fprintf(&line, " D:%s", key)
						b.Delete(killIndex, []byte(key))
						single = func() error { return db.Delete(killIndex, []byte(key)) }
						continue
					}
					n := 1 + r.IntN(200)
					if r.IntN(100) < 40 {
						n = 600 + r.IntN(3500) // kept in the journal
					}
					vs := seed<<24 ^ uint64(g)<<20 ^ uint64(seq)<<4 ^ uint64(i)
					fmt.Fprintf(&line, " P:%s:%d:%d", key, n, vs)
					v := killValue(vs, n)
					b.Put(killIndex, []byte(key), v)
					single = func() error { return db.Put(killIndex, []byte(key), v) }
				}
				emit(line.String())
				var err error
				if b.Len() == 1 {
					err = single() // DB.Put and DB.Delete too
				} else {
					err = db.Write(b)
				}
				if err != nil {
					die("writer %d batch %d: %v", g, seq, err)
				}
				emit(fmt.Sprintf("A %d %d", g, seq))
			}
		}()
	}
	time.Sleep(60 * time.Second) // the parent kills us long before
	die("not killed after 60s")
}

// killState is what a key holds: absent, or the value killValue(seed, n).
type killState struct {
	present bool
	n       int
	seed    uint64
}

func (s killState) String() string {
	if !s.present {
		return "absent"
	}
	return fmt.Sprintf("value(len %d, seed %d)", s.n, s.seed)
}

type killOp struct {
	key string
	st  killState
}

func parseKillOps(fields []string) ([]killOp, error) {
	var ops []killOp
	for _, f := range fields {
		p := strings.Split(f, ":")
		switch {
		case len(p) == 2 && p[0] == "D":
			ops = append(ops, killOp{key: p[1]})
		case len(p) == 4 && p[0] == "P":
			n, err1 := strconv.Atoi(p[2])
			seed, err2 := strconv.ParseUint(p[3], 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return nil, err
			}
			ops = append(ops, killOp{key: p[1], st: killState{present: true, n: n, seed: seed}})
		default:
			return nil, fmt.Errorf("bad op %q", f)
		}
	}
	return ops, nil
}

// observe reads key and says which state it is in: want[i] if it matches
// one, else -1 and a description.
func observeKey(db *kdb.DB, key string, want ...killState) (int, string) {
	v, err := db.Get(killIndex, []byte(key))
	if err != nil && !errors.Is(err, kdb.ErrNotFound) {
		return -1, fmt.Sprintf("get: %v", err)
	}
	for i, w := range want {
		if !w.present && err != nil {
			return i, ""
		}
		if w.present && err == nil && bytes.Equal(v, killValue(w.seed, w.n)) {
			return i, ""
		}
	}
	if err != nil {
		return -1, "absent"
	}
	return -1, fmt.Sprintf("%d bytes that match no written value", len(v))
}

type killCounts struct {
	kills, checked, lost, ackedOps, inFlight, beforeOpen, duringOpen int
	replayed, torn, redo, scanned                                    int
}

// TestKill_RandomMoments SIGKILLs a writing child process at random moments,
// at least 50 times (KDB_LONG=1: 500; KDB_KILLS overrides),
// on one store that accumulates across the rounds. After each kill it
// reopens the store and requires every acknowledged put with its exact value,
// every acknowledged delete absent, each batch in flight at the kill wholly
// there or wholly absent, no key that was never written, and Check to pass.
//
// A SIGKILL does not lose the OS page cache, so this tests process crashes
// (torn journal tails, half-done checkpoints and GC); the MemFS crash
// campaign tests power loss.
func TestKill_RandomMoments(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	kills := 50
	if os.Getenv("KDB_LONG") != "" {
		kills = 500
	}
	if v, err := strconv.Atoi(os.Getenv("KDB_KILLS")); err == nil {
		kills = v
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("KDB_KILL_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (KDB_KILL_SEED reproduces the choices, not the timing)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()

	model := map[string]killState{} // latest acknowledged state of each key written
	var c killCounts
	openTime := 5 * time.Millisecond // the child's latest Open duration
	var openTimes []time.Duration    // every whole Open the parent saw
	start := time.Now()
	for round := 0; round < kills; round++ {
		kr := killRound(t, exe, dir, seed+uint64(round)*1000003, rng, openTime)
		lines, stderr := kr.lines, kr.stderr
		c.kills++
		switch {
		case !kr.opening:
			c.beforeOpen++
		case !kr.ready:
			c.duringOpen++
		default:
			openTime = kr.openTime
			openTimes = append(openTimes, kr.openTime)
		}
		// Replay the child's report: the acknowledged ops update the model;
		// each writer has at most one batch begun and not acknowledged.
		pending := map[int][]killOp{}
		pendingSeq := map[int]int{}
		for _, l := range lines {
			f := strings.Fields(l)
			switch {
			case len(f) == 0:
			case f[0] == "E":
				t.Fatalf("round %d: the child failed: %s\nstderr:\n%s", round, l, stderr)
			case f[0] == "B" && len(f) >= 3:
				g, _ := strconv.Atoi(f[1])
				seq, _ := strconv.Atoi(f[2])
				ops, err := parseKillOps(f[3:])
				if err != nil {
					t.Fatalf("round %d: line %q: %v", round, l, err)
				}
				if _, ok := pending[g]; ok {
					t.Fatalf("round %d: writer %d began batch %d with batch %d in flight", round, g, seq, pendingSeq[g])
				}
				pending[g], pendingSeq[g] = ops, seq
			case f[0] == "A" && len(f) == 3:
				g, _ := strconv.Atoi(f[1])
				seq, _ := strconv.Atoi(f[2])
				ops, ok := pending[g]
				if !ok || pendingSeq[g] != seq {
					t.Fatalf("round %d: ack of writer %d batch %d that is not in flight", round, g, seq)
				}
				for _, o := range ops {
					model[o.key] = o.st
					c.ackedOps++
				}
				delete(pending, g)
			}
		}
		c.inFlight += len(pending)

		db, err := kdb.Open(dir, killOptions())
		if err != nil {
			t.Fatalf("round %d: reopen after the kill: %v\nchild stderr:\n%s", round, err, stderr)
		}
		rep := db.Recovery()
		if rep.RecordsReplayed > 0 {
			c.replayed++
		}
		if rep.TornBytesTruncated > 0 {
			c.torn++
		}
		if rep.RedoApplied {
			c.redo++
		}
		var problems []string
		if rep.FreeListPath == "scanned" {
			c.scanned++
			if rep.Reason == "" {
				problems = append(problems, "the free list was scanned without a reason")
			}
		}
		inBatch := map[string]bool{}
		// Each batch in flight: wholly old or wholly new.
		for g, ops := range pending {
			newCount, oldCount := 0, 0
			for _, o := range ops {
				inBatch[o.key] = true
				old := model[o.key] // zero value: absent
				i, got := observeKey(db, o.key, o.st, old)
				switch {
				case i < 0:
					c.lost++
					problems = append(problems, fmt.Sprintf("key %s of writer %d's batch in flight: %s, want %v or %v", o.key, g, got, o.st, old))
					continue
				case o.st == old:
					// Either way.
				case i == 0:
					newCount++
				default:
					oldCount++
				}
				if i == 0 {
					model[o.key] = o.st
				}
			}
			if newCount > 0 && oldCount > 0 {
				c.lost++
				problems = append(problems, fmt.Sprintf("writer %d's batch %d in flight at the kill is partly there (%d ops new, %d old)", g, pendingSeq[g], newCount, oldCount))
			}
		}
		// Every other key: exactly its latest acknowledged state.
		for key, st := range model {
			if inBatch[key] {
				continue
			}
			c.checked++
			if i, got := observeKey(db, key, st); i < 0 {
				c.lost++
				problems = append(problems, fmt.Sprintf("key %s: %s, want %v", key, got, st))
			}
		}
		// And nothing else.
		err = db.View(func(s *kdb.Snapshot) error {
			it := s.Iter(killIndex)
			for ok := it.First(); ok; ok = it.Next() {
				if st, known := model[string(it.Key())]; !known || !st.present {
					problems = append(problems, fmt.Sprintf("key %s is present; want absent", it.Key()))
				}
			}
			return it.Err()
		})
		if err != nil {
			problems = append(problems, fmt.Sprintf("scan: %v", err))
		}
		if _, err := db.Check(); err != nil {
			problems = append(problems, fmt.Sprintf("check: %v", err))
		}
		if err := db.Close(); err != nil {
			problems = append(problems, fmt.Sprintf("close: %v", err))
		}
		if len(problems) > 0 {
			if len(problems) > 10 {
				problems = append(problems[:10], fmt.Sprintf("... and %d more", len(problems)-10))
			}
			t.Fatalf("round %d (%d lines from the child; recovery %+v):\n%s", round, len(lines), rep, strings.Join(problems, "\n"))
		}
	}
	t.Logf("kills=%d acknowledged-checked=%d lost=%d (acknowledged ops=%d, batches in flight at a kill=%d; kills inside the child's Open (its recovery)=%d, before it=%d; median whole Open %v; recoveries that replayed=%d, truncated a torn tail=%d, applied db.redo=%d, scanned the free list=%d; %v)",
		c.kills, c.checked, c.lost, c.ackedOps, c.inFlight, c.duringOpen, c.beforeOpen, medianDuration(openTimes), c.replayed, c.torn, c.redo, c.scanned, time.Since(start).Round(time.Millisecond))
	if c.ackedOps == 0 {
		t.Fatal("the children acknowledged nothing")
	}
	if c.kills >= 20 && c.duringOpen == 0 {
		t.Fatal("no kill landed inside the child's Open: recovery was never interrupted")
	}
}

func medianDuration(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2].Round(100 * time.Microsecond)
}

// killResult is what one round saw of its child.
type killResult struct {
	lines    []string
	stderr   string
	opening  bool          // the child had begun Open ("O")
	ready    bool          // Open had returned ("R")
	openTime time.Duration // from "O" to "R", if ready
}

// killRound runs one child and SIGKILLs it at a random moment: in three
// rounds of four 5-80 ms after its store is open or after a random number
// of acknowledgements; in the fourth inside its Open, at a uniform moment
// of the time the last Open took (openTime), or, one time in eight of
// those, at a random point of the process's start before Open.
func killRound(t *testing.T, exe, dir string, seed uint64, rng *rand.Rand, openTime time.Duration) killResult {
	t.Helper()
	cmd := exec.Command(exe, "-test.run=^TestKill_Child$", "-test.count=1")
	cmd.Env = append(os.Environ(), killEnvDir+"="+dir, killEnvSeed+"="+strconv.FormatUint(seed, 10))
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 1024)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()

	var (
		deadline      <-chan time.Time
		lines         []string
		opening       bool
		ready         bool
		openedAt      time.Time
		readyAfter    time.Duration
		ackLimit      = -1
		earlyKill     = rng.IntN(4) == 0
		beforeOpen    = earlyKill && rng.IntN(8) == 0
		intoOpenDelay = time.Duration(rng.Int64N(int64(max(openTime, time.Millisecond))))
	)
	if beforeOpen {
		deadline = time.After(time.Duration(rng.IntN(30)) * time.Millisecond)
	}
	acks := 0
	killed, exited := false, false
	kill := func() {
		if !killed {
			killed = true
			_ = cmd.Process.Kill() // SIGKILL
		}
	}
	for !exited {
		select {
		case l, ok := <-ch:
			if !ok {
				exited = true
				break
			}
			lines = append(lines, l)
			switch {
			case l == "O":
				opening, openedAt = true, time.Now()
				if earlyKill && !beforeOpen {
					deadline = time.After(intoOpenDelay)
				}
			case l == "R":
				ready, readyAfter = true, time.Since(openedAt)
				if !earlyKill {
					deadline = time.After(time.Duration(5+rng.IntN(76)) * time.Millisecond)
					if rng.IntN(3) == 0 {
						ackLimit = 1 + rng.IntN(200)
					}
				}
			case strings.HasPrefix(l, "A "):
				if acks++; acks == ackLimit {
					kill()
				}
			case strings.HasPrefix(l, "E "):
				kill()
			}
		case <-deadline:
			kill()
			deadline = nil
		case <-time.After(30 * time.Second):
			kill()
			t.Fatalf("the child is silent after 30s; stderr:\n%s", errBuf.String())
		}
	}
	// The pipe is at EOF: the child is dead or exiting.
	werr := cmd.Wait()
	if !killed {
		t.Fatalf("the child exited by itself (%v); last lines %q; stderr:\n%s", werr, lines[max(0, len(lines)-3):], errBuf.String())
	}
	return killResult{lines: lines, stderr: errBuf.String(), opening: opening, ready: ready, openTime: readyAfter}
}
