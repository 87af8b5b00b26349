package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kdb-project/kdb"
)

func TestStress_VerifyRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, out, errs := runTool(t, "stress", "--size", "700", "--writers", "4", "--count", "300", dir)
	if code != 0 {
		t.Fatalf("stress: exit %d: %s", code, errs)
	}
	keys := strings.Fields(out)
	if len(keys) != 300 {
		t.Fatalf("stress printed %d keys, want 300", len(keys))
	}
	acked := filepath.Join(t.TempDir(), "acked")
	if err := os.WriteFile(acked, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	code, m := runJSON(t, "verify", "--json", "--acked", acked, dir)
	if code != 0 || m["checked"] != float64(300) || m["ok"] != true {
		t.Fatalf("verify: exit %d, %v", code, m)
	}

	// A key that was never written is named, and the exit code is 1.
	if err := os.WriteFile(acked, []byte(out+"never-written\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, vout, _ := runTool(t, "verify", "--acked", acked, dir)
	if code != 1 || !strings.Contains(vout, "missing: never-written\n") {
		t.Fatalf("verify with a missing key: exit %d\n%s", code, vout)
	}

	// A second run adds keys of its own; both lists verify.
	code, out2, _ := runTool(t, "stress", "--size", "10", "--writers", "2", "--duration", "200ms", dir)
	if code != 0 || len(strings.Fields(out2)) == 0 {
		t.Fatalf("stress --duration: exit %d, %d keys", code, len(strings.Fields(out2)))
	}
	if err := os.WriteFile(acked, []byte(out+out2), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runTool(t, "verify", "--acked", acked, dir); code != 0 {
		t.Fatalf("verify both runs: exit %d %s", code, errs)
	}
	if code, _, _ := runTool(t, "check", dir); code != 0 {
		t.Fatalf("check after stress: exit %d", code)
	}
	if code, _, _ := runTool(t, "verify", dir); code != exitUsage {
		t.Errorf("verify without --acked: exit %d", code)
	}
}

func TestDump_IndexAndDestinations(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 50)
	before := snapshotFiles(t, dir)
	code, m := runJSON(t, "dump", "--json", "--index", "users", "--limit", "10", "--start", "user-00005", dir)
	if code != 0 {
		t.Fatalf("dump index: exit %d", code)
	}
	keys := m["keys"].([]any)
	if len(keys) != 10 || keys[0].(map[string]any)["key"] != "user-00005" || m["next"] != "user-00015" {
		t.Errorf("dump index: %d keys, first %v, next %v", len(keys), keys[0], m["next"])
	}
	if keys[2].(map[string]any)["value_size"] != float64(len("value-7")) {
		t.Errorf("dump index: value_size %v", keys[1])
	}
	code, out, _ := runTool(t, "dump", "--index", "users", "--limit", "0", "--values", dir)
	if code != 0 || strings.Count(out, "\n") != 50 || !strings.Contains(out, "\"user-00049\"\tvalue-49\n") {
		t.Errorf("dump index --values: exit %d\n%s", code, out)
	}
	code, m = runJSON(t, "dump", "--json", "--queue", "orders", "--start", "2", "--limit", "2", dir)
	msgs, _ := m["messages"].([]any)
	if code != 0 || len(msgs) != 2 || msgs[0].(map[string]any)["id"] != "o1" || m["next_seq"] != float64(4) {
		t.Errorf("dump queue: exit %d, %v", code, m)
	}
	code, m = runJSON(t, "dump", "--json", "--topic", "events", "--sub", "audit", dir)
	if msgs, _ := m["messages"].([]any); code != 0 || len(msgs) != 5 {
		t.Errorf("dump topic sub: exit %d, %v", code, m)
	}
	if code, _, _ := runTool(t, "dump", "--index", "nope", dir); code != 1 {
		t.Errorf("dump of a missing index: exit %d, want 1", code)
	}
	if code, _, _ := runTool(t, "dump", "--index", "a", "--queue", "b", dir); code != exitUsage {
		t.Errorf("dump with two targets: exit %d, want 2", code)
	}
	requireSameFiles(t, before, snapshotFiles(t, dir))
}

// TestStress_KillThenVerify is the crash test stress exists for: a real
// stress process is SIGKILLed mid-write, and every key it printed must be
// in the store.
func TestStress_KillThenVerify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "stress", "--size", "2000", "--writers", "8", "--duration", "60s", dir)
	cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked strings.Builder
	sc := bufio.NewScanner(stdout)
	n := 0
	for sc.Scan() {
		acked.WriteString(sc.Text() + "\n")
		if n++; n == 500 {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cmd.Wait(); err == nil {
		t.Fatalf("stress exited cleanly after %d keys; want a SIGKILL", n)
	}
	if n < 500 {
		t.Fatalf("stress printed only %d keys", n)
	}
	file := filepath.Join(t.TempDir(), "acked")
	if err := os.WriteFile(file, []byte(acked.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	// verify runs the recovery itself; then again after recover.
	for _, step := range []string{"verify", "recover", "verify"} {
		var code int
		var out, errs string
		if step == "verify" {
			code, out, errs = runTool(t, "verify", "--acked", file, dir)
		} else {
			code, out, errs = runTool(t, "recover", dir)
		}
		if code != 0 {
			t.Fatalf("%s after SIGKILL: exit %d\n%s%s", step, code, out, errs)
		}
	}
	if code, out, _ := runTool(t, "check", dir); code != 0 {
		t.Fatalf("check after SIGKILL and recover: exit %d\n%s", code, out)
	}
}

// TestStress_BoundsBytesInFlight: each writer holds its value (and the
// engine a copy) while its write is in flight, so --writers 1024 --size
// 8388608, each within its own range, made stress hold ~16 GiB (a run of
// 300 writes peaked at 4.9 GB resident). Their product is bounded: a
// usage error, and no store is created.
func TestStress_BoundsBytesInFlight(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	code, out, errs := runTool(t, "stress", "--writers", "1024", "--size", "8388608", "--count", "1", dir)
	if code != exitUsage || !strings.Contains(errs, "--writers") || out != "" {
		t.Fatalf("stress --writers 1024 --size 8 MiB: exit %d, stdout %q, stderr %q; want a usage error (exit %d) about --writers × --size", code, out, errs, exitUsage)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("stress with a refused flag created %s", dir)
	}
	// At the bound itself it runs.
	code, _, errs = runTool(t, "stress", "--writers", "128", "--size", "8388608", "--count", "1", dir)
	if code != exitOK {
		t.Fatalf("stress --writers 128 --size 8 MiB (1 GiB in flight): exit %d: %s", code, errs)
	}
}

// TestVerify_WrongValueIsReported: a key that reads back, but not with the
// value stress wrote under it, is a wrong value (exit 1, named), not intact.
func TestVerify_WrongValueIsReported(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, out, errs := runTool(t, "stress", "--size", "100", "--writers", "2", "--count", "20", dir)
	if code != exitOK {
		t.Fatalf("stress: exit %d: %s", code, errs)
	}
	keys := strings.Fields(out)
	acked := filepath.Join(t.TempDir(), "acked")
	if err := os.WriteFile(acked, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	wrong := stressValue(keys[3], 100)
	wrong[50] ^= 1 // the right size, one bit off
	if err := db.Put("stress", []byte(keys[3]), wrong); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	code, m := runJSON(t, "verify", "--json", "--acked", acked, dir)
	mism, _ := m["mismatched"].([]any)
	if code != exitProblems || m["ok"] != false || len(mism) != 1 || mism[0] != keys[3] {
		t.Fatalf("verify: exit %d, %v; want exit 1 and %s mismatched", code, m, keys[3])
	}
	code, vout, _ := runTool(t, "verify", "--acked", acked, dir)
	if code != exitProblems || !strings.Contains(vout, "wrong value: "+keys[3]+"\n") || !strings.Contains(vout, "20 keys checked, 0 missing, 1 with a wrong value") {
		t.Fatalf("verify: exit %d\n%s", code, vout)
	}
}

// TestStress_FailedWritesAreNotExit0: stress whose writes fail (here the
// file size limit, as a full disk: a checkpoint cannot write db.redo past
// 1 MiB) says so and exits 3, never 0: a crash test whose store could not
// take the writes must not pass. The limit leaves room for the store's
// creation (Open's first checkpoint grows db.data to about 1 MiB): until
// 2026-12-08 it was 100 KiB, so that the Open failed, and the test passed
// without reaching the writes (a survivor of the full mutation run: stress
// exiting 0 after failed writes went unnoticed).
func TestStress_FailedWritesAreNotExit0(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "stress", "--count", "2000", "--size", "400", "--segment-size", "65536", dir)
	cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1", "KDBTOOL_TEST_FSIZE=1228800")
	var errb strings.Builder
	cmd.Stderr = &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitIO || !strings.Contains(errb.String(), "file too large") {
		t.Fatalf("stress with files limited to 1200 KiB: %v, stderr %q; want exit %d saying the file is too large", err, errb.String(), exitIO)
	}
	if !strings.Contains(errb.String(), "acknowledged by") {
		t.Fatalf("stress with files limited to 1200 KiB failed before it wrote (no summary): %q; the limit must leave room for the store's creation", errb.String())
	}
}

// startStress starts a stress child process with args (--json added) and
// returns it, the reader of its stdout (the acknowledged keys) and its
// stderr (the summary, once it has exited).
func startStress(t *testing.T, args ...string) (*exec.Cmd, *bufio.Scanner, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"stress", "--json"}, args...)...)
	cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1")
	var errb strings.Builder
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, bufio.NewScanner(stdout), &errb
}

// stopStress reads n keys from sc, then sends stress sig, reads the rest,
// waits for it and returns how many keys it printed and its summary.
func stopStress(t *testing.T, cmd *exec.Cmd, sc *bufio.Scanner, errb *strings.Builder, n int, sig os.Signal) (int, map[string]any) {
	t.Helper()
	keys := 0
	for keys < n && sc.Scan() {
		keys++
	}
	if keys < n {
		cmd.Wait()
		t.Fatalf("%v: stress stopped by itself after %d keys, before the signal; stderr %s", cmd.Args, keys, errb)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		keys++
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: stopped by %v: %v, stderr %s; want exit 0", cmd.Args, sig, err, errb)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(errb.String()), &m); err != nil {
		t.Fatalf("%v: summary not JSON: %v\n%s", cmd.Args, err, errb)
	}
	return keys, m
}

// TestStress_CountZeroRunsUntilSignal: an explicit --count 0 stopped after
// 1000 writes, though its help says "0: until --duration or a signal"
// (only neither flag means 1000). It writes until the signal, which the
// summary reports as interrupted.
func TestStress_CountZeroRunsUntilSignal(t *testing.T) {
	t.Parallel()
	cmd, sc, errb := startStress(t, "--count", "0", "--size", "10", "--writers", "8", t.TempDir())
	keys, m := stopStress(t, cmd, sc, errb, 1100, interruptSignals(t)[0])
	if m["acked"] != float64(keys) || m["interrupted"] != true {
		t.Errorf("stress --count 0 stopped by a signal after %d keys: summary %v; want acked %d, interrupted", keys, m, keys)
	}
	// Neither --count nor --duration: 1000 writes.
	code, out, errs := runTool(t, "stress", "--size", "10", "--writers", "8", t.TempDir())
	if n := len(strings.Fields(out)); code != exitOK || n != 1000 {
		t.Errorf("stress without --count or --duration: exit %d, %d keys, stderr %q; want 1000", code, n, errs)
	}
}

// TestStress_InterruptedIsASignal: with --duration, a stress stopped by
// SIGINT or SIGTERM reported "interrupted": false (it was computed only
// without --duration). It is true when a signal stopped it, false when
// --duration or --count ended it.
func TestStress_InterruptedIsASignal(t *testing.T) {
	t.Parallel()
	for _, sig := range interruptSignals(t) {
		cmd, sc, errb := startStress(t, "--duration", "1h", "--size", "10", "--writers", "4", t.TempDir())
		if keys, m := stopStress(t, cmd, sc, errb, 50, sig); m["acked"] != float64(keys) || m["interrupted"] != true {
			t.Errorf("stress --duration 1h stopped by %v: summary %v; want acked %d, interrupted", sig, m, keys)
		}
	}
	for _, args := range [][]string{{"--duration", "100ms"}, {"--count", "20"}, {"--count", "20", "--duration", "1h"}, {"--count", "0", "--duration", "100ms"}} {
		code, _, errs := runTool(t, append([]string{"stress", "--json", "--size", "10", t.TempDir()}, args...)...)
		var m map[string]any
		if err := json.Unmarshal([]byte(errs), &m); err != nil || code != exitOK || m["interrupted"] != false {
			t.Errorf("stress %q: exit %d, summary %s (%v); want exit 0, interrupted false", args, code, errs, err)
		}
	}
}
