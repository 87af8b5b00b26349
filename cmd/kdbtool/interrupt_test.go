package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// interruptSignals returns SIGINT and SIGTERM, or SIGTERM alone where this
// process ignores SIGINT (run in the background by a shell without job
// control): its children inherit that, and kdbtool leaves an ignored
// signal ignored.
func interruptSignals(t *testing.T) []syscall.Signal {
	if signal.Ignored(syscall.SIGINT) {
		t.Logf("SIGINT is ignored here: SIGTERM only")
		return []syscall.Signal{syscall.SIGTERM}
	}
	return []syscall.Signal{syscall.SIGINT, syscall.SIGTERM}
}

// pausedExporting is what a child with KDBTOOL_TEST_PAUSE_EXPORT=1 prints
// on stderr once its export has written a first part of the snapshot.
const pausedExporting = "test: paused exporting"

// TestExport_InterruptRemovesItsTemp: an export stopped by ctrl-C (SIGINT)
// or SIGTERM removes its temporary file, leaves FILE as it was, says so,
// and exits 130. It was killed by the signal and left the partial
// snapshot, as large as the store, hidden beside FILE (.FILE.tmp-NNN:
// 'timeout -s INT 3 kdbtool export live big.kdbx' left 678 MB) until the
// next export to that very FILE.
func TestExport_InterruptRemovesItsTemp(t *testing.T) {
	t.Parallel()
	src := makeStore(t, 3000)
	for _, sig := range interruptSignals(t) {
		out := t.TempDir()
		file := filepath.Join(out, "snap.kdbx")
		if err := os.WriteFile(file, []byte("the old snapshot"), 0o600); err != nil {
			t.Fatal(err)
		}
		code, said := signalWhenPaused(t, []string{"export", src, file}, "KDBTOOL_TEST_PAUSE_EXPORT=1", pausedExporting, sig)
		if code != exitInterrupted || !strings.Contains(said, "interrupted") {
			t.Errorf("%v: exit %d, stderr %q; want %d and 'interrupted'", sig, code, said, exitInterrupted)
		}
		if b, err := os.ReadFile(file); err != nil || !bytes.Equal(b, []byte("the old snapshot")) {
			t.Errorf("%v: FILE is %q (%v), want the old one", sig, b, err)
		}
		if names := dirNames(t, out); len(names) != 1 {
			t.Errorf("%v: %s holds %v, want FILE only", sig, out, names)
		}
	}
}

// TestImport_InterruptRemovesItsTemp: an import stopped by ctrl-C (SIGINT)
// removes the store it was building, creates no DIR, says so and exits
// 130. It was killed by the signal and left the partial store, hidden
// beside DIR (.DIR.import-...: 'timeout -s INT 3 kdbtool import big.kdbx
// imp' left 593 MB), until the next import into that very DIR.
func TestImport_InterruptRemovesItsTemp(t *testing.T) {
	t.Parallel()
	src := makeStore(t, 3000)
	var errb bytes.Buffer
	imp := startPipedImport(t, src, 1, 2, &errb)
	defer imp.w.Close()
	cmd, dst := imp.cmd, imp.dst
	if err := cmd.Process.Signal(interruptSignals(t)[0]); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted || !strings.Contains(errb.String(), "interrupted") {
		t.Errorf("exit %d (%v), stderr %q; want %d and 'interrupted'", code, cmd.ProcessState, errb.String(), exitInterrupted)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Errorf("an interrupted import left %s: %v", dst, err)
	}
	if left := importLeftovers(t, dst); len(left) != 0 {
		t.Errorf("an interrupted import left %v", left)
	}
}

// pausedFlags is what a child with KDBTOOL_TEST_PAUSE_FLAGS=1 prints on
// stderr once export or stress has parsed its flags; it goes on when its
// stdin is closed.
const pausedFlags = "test: paused after the flags"

// TestInterrupt_DuringTheChecks: export and stress handled SIGINT and
// SIGTERM only once their arguments were checked (stress: once the store
// was open), so a signal in their first moments killed them (exit 143 for
// SIGTERM) instead of the documented stop. One sent right after the flags
// are parsed is handled: export removes what it made and exits 130,
// stress writes nothing more and reports "interrupted": true (exit 0).
func TestInterrupt_DuringTheChecks(t *testing.T) {
	t.Parallel()
	src := makeStore(t, 100)
	for _, sig := range interruptSignals(t) {
		out := t.TempDir()
		file := filepath.Join(out, "snap.kdbx")
		for _, args := range [][]string{{"export", src, file}, {"stress", "--json", "--count", "0", filepath.Join(out, "st")}} {
			// PAUSE_EXPORT too: an export that went past its checks
			// before the signal would wait for it there, not finish.
			code, said := signalWhenPaused(t, args, "KDBTOOL_TEST_PAUSE_FLAGS=1 KDBTOOL_TEST_PAUSE_EXPORT=1", pausedFlags, sig)
			if args[0] == "export" {
				if code != exitInterrupted || !strings.Contains(said, "interrupted") {
					t.Errorf("%v during export's checks: exit %d, stderr %q; want %d and 'interrupted'", sig, code, said, exitInterrupted)
				}
				if names := dirNames(t, out); len(names) != 0 {
					t.Errorf("%v during export's checks: %s holds %v, want nothing", sig, out, names)
				}
				continue
			}
			if code != exitOK || !strings.Contains(said, `"interrupted": true`) {
				t.Errorf("%v during stress's checks: exit %d, stderr %q; want exit 0 and interrupted true", sig, code, said)
			}
		}
	}
}

// signalWhenPaused runs kdbtool args in a child with the test pauses
// (space-separated NAME=1 settings) set, sends sig once the child prints
// the line paused on stderr, lets it go on (a flags pause waits for its
// stdin to close), and returns its exit code and what it printed on
// stderr but that line.
func signalWhenPaused(t *testing.T, args []string, pauses, paused string, sig os.Signal) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "KDBTOOL_TEST_MAIN=1"), strings.Fields(pauses)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	var said strings.Builder
	for sc.Scan() && !strings.Contains(sc.Text(), paused) {
		said.WriteString(sc.Text() + "\n")
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	stdin.Close() // the signal is sent: go on
	for sc.Scan() {
		said.WriteString(sc.Text() + "\n")
	}
	_ = cmd.Wait()
	return cmd.ProcessState.ExitCode(), said.String()
}

// TestInterrupt_RepairRecoverVerify: repair, recover and verify had no
// handling of SIGINT or SIGTERM: a signal killed them (exit 130 or 143 by
// the shell), silently, wherever they were; repair --apply --rebuild-index
// so left a store without db.data. Each now stops at a safe point with exit
// 130 and says what it changed: before it opens (or changes) the store,
// nothing; recover and a writable verify once their open has run to its
// end, that recovery ran and the store is closed; repair --apply once its
// .broken copies are made, that the store is as it was.
func TestInterrupt_RepairRecoverVerify(t *testing.T) {
	t.Parallel()
	src := makeStore(t, 300)
	acked := filepath.Join(t.TempDir(), "acked")
	if err := os.WriteFile(acked, []byte("user-00001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args   []string // DIR is appended
		pauses string
		paused string
		said   string // what the message must say
		stale  bool   // the store's db.free is made stale first, for repair --apply to rebuild
		same   bool   // the page-file files must be as they were
	}{
		{[]string{"recover"}, "KDBTOOL_TEST_PAUSE_FLAGS=1", pausedFlags, "before the store was opened: nothing was changed", false, true},
		{[]string{"recover"}, "KDBTOOL_TEST_PAUSE_OPEN=1", pausedOpen, "recovery ran to its end and the store was closed", false, false},
		{[]string{"verify", "--acked", acked, "--index", "users"}, "KDBTOOL_TEST_PAUSE_FLAGS=1", pausedFlags, "before the store was opened: nothing was changed", false, true},
		{[]string{"verify", "--read-only", "--acked", acked, "--index", "users"}, "KDBTOOL_TEST_PAUSE_FLAGS=1", pausedFlags, "nothing was changed", false, true},
		{[]string{"verify", "--acked", acked, "--index", "users"}, "KDBTOOL_TEST_PAUSE_OPEN=1", pausedOpen, "is closed; nothing else was changed", false, false},
		{[]string{"repair"}, "KDBTOOL_TEST_PAUSE_FLAGS=1", pausedFlags, "nothing was changed", true, true},
		{[]string{"repair", "--apply"}, "KDBTOOL_TEST_PAUSE_FLAGS=1", pausedFlags, "before the repair began: nothing was changed", true, true},
		{[]string{"repair", "--apply"}, "KDBTOOL_TEST_PAUSE_REPAIR=saved", pausedRepairing, "the repair stopped before it changed the store, which is as it was (the .broken copies made: ", true, true},
	} {
		for _, sig := range interruptSignals(t) {
			dir := filepath.Join(t.TempDir(), "store")
			if err := copyDir(src, dir); err != nil {
				t.Fatal(err)
			}
			if c.stale {
				staleFree(t, dir)
			}
			want := storeContent(t, dir)
			before := pageFiles(t, dir)
			code, said := signalWhenPaused(t, append(append([]string{}, c.args...), dir), c.pauses, c.paused, sig)
			if code != exitInterrupted || !strings.Contains(said, "interrupted") || !strings.Contains(said, c.said) {
				t.Errorf("%v %s: exit %d, stderr %q; want %d, 'interrupted' and %q", c.args, c.pauses, code, said, exitInterrupted, c.said)
			}
			if c.same {
				requireUntouched(t, strings.Join(c.args, " ")+" interrupted", before, pageFiles(t, dir))
			}
			if got := storeContent(t, dir); got != want {
				t.Errorf("%v %s: the store differs after the interrupt", c.args, c.pauses)
			}
		}
	}
}
