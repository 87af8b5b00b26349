package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestVerify_ReadOnlyOnALiveStoreChecksOnlyKeysAckedBeforeItsOpen: verify
// --read-only takes no lock, so it runs beside the live writer (stress piped
// into it, or its list file still growing). Its open sees the writes
// acknowledged before it; a key acknowledged later must not be reported
// missing. verify used to open the store first and read the list after, so
// every key listed after its open was "missing" (exit 1: a false loss).
// Here the list comes through a FIFO: the first keys fill more than the
// pipe's buffer, so that their write returns only once verify reads them;
// then more keys are written to the store, and only then listed.
func TestVerify_ReadOnlyOnALiveStoreChecksOnlyKeysAckedBeforeItsOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: testSegmentSize})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := func(i int) string { return fmt.Sprintf("live-key-%07d-%s", i, strings.Repeat("x", 60)) }
	put := func(from, to int) {
		b := kdb.NewBatch()
		for i := from; i < to; i++ {
			b.Put("stress", []byte(key(i)), stressValue(key(i), 64))
			if b.Len() == 500 || i == to-1 {
				if err := db.Write(b); err != nil {
					t.Fatal(err)
				}
				b.Reset()
			}
		}
	}
	const first, more = 4000, 100 // 4000 lines of 78 bytes: more than a 64 KiB pipe holds
	put(0, first)

	fifo := filepath.Join(t.TempDir(), "acked")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errs := runTool(t, "verify", "--read-only", "--acked", fifo, dir)
		done <- result{code, out, errs}
	}()
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriter(w)
	for i := 0; i < first; i++ {
		fmt.Fprintln(bw, key(i))
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	// verify is reading the list now. The writer acknowledges more writes,
	// and lists them.
	put(first, first+more)
	for i := first; i < first+more; i++ {
		fmt.Fprintln(bw, key(i))
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	want := fmt.Sprintf("%d keys checked, 0 missing, 0 with a wrong value", first+more)
	if r.code != 0 || !strings.Contains(r.out, want) {
		t.Fatalf("verify --read-only beside the writer: exit %d, want 0 and %q:\n%s%s", r.code, want, lastLines(r.out, 3), r.err)
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n") + "\n"
}

// TestVerify_SkipsALastLineStillBeingWritten: verify reads a regular list
// file up to the size it had when verify began; a last line cut there (no
// newline) and the file grown since is a key whose line stress was still
// writing, not acknowledged then: it is skipped, not reported missing. In
// a file that has not grown, a last line without a newline is a key.
func TestVerify_SkipsALastLineStillBeingWritten(t *testing.T) {
	t.Parallel()
	for _, grows := range []bool{true, false} {
		name := filepath.Join(t.TempDir(), "acked")
		if err := os.WriteFile(name, []byte("key-1\nkey-2\nkey-3-ha"), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		in, split, err := ackedBeforeOpen(f)
		if err != nil {
			t.Fatal(err)
		}
		if grows { // the writer goes on
			w, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.WriteString("lf\nkey-4\n"); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}
		sc := bufio.NewScanner(in)
		sc.Split(split)
		var got []string
		for sc.Scan() {
			got = append(got, sc.Text())
		}
		want := "key-1 key-2"
		if !grows {
			want += " key-3-ha"
		}
		if err := sc.Err(); err != nil || strings.Join(got, " ") != want {
			t.Errorf("grown %v: read %q, %v; want %q", grows, got, err, want)
		}
	}
}
