package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// pausedSaving is what a child with KDBTOOL_TEST_PAUSE_SAVE=1 prints on
// stderr, with the name, when it stops in the middle of a .broken copy.
const pausedSaving = "test: paused saving"

// pausedOpen is what a child with KDBTOOL_TEST_PAUSE_OPEN=1 prints on
// stderr once recover (or a writable verify) has the store open.
const pausedOpen = "test: paused with the store open"

// pausedDemo is what a child with KDBTOOL_TEST_PAUSE_DEMO=1 prints on
// stderr once demo has killed its writer, before it copies the crashed
// store (nobody holds the store's lock then).
const pausedDemo = "test: paused the demo after the kill"

// pausedRepairing is what a child with KDBTOOL_TEST_PAUSE_REPAIR=STEP prints
// on stderr, with STEP, once repair --apply has done that step.
const pausedRepairing = "test: paused repairing after"

// TestMain lets a test run the test binary as kdbtool itself (for tests
// that must SIGKILL a real process): KDBTOOL_TEST_MAIN=1 makes it main.
func TestMain(m *testing.M) {
	if os.Getenv("KDBTOOL_TEST_MAIN") == "1" {
		// KDBTOOL_TEST_NOFILE=N: run with at most N file descriptors.
		if n, err := strconv.ParseUint(os.Getenv("KDBTOOL_TEST_NOFILE"), 10, 64); err == nil {
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
				os.Exit(99)
			}
		}
		// KDBTOOL_TEST_FSIZE=N: no file may grow past N bytes (a write
		// past it fails with EFBIG, as on a full disk; Go ignores SIGXFSZ).
		if n, err := strconv.ParseUint(os.Getenv("KDBTOOL_TEST_FSIZE"), 10, 64); err == nil {
			if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
				os.Exit(99)
			}
		}
		// KDBTOOL_TEST_DEMO_LOSE_SCAN=1: once the demo has copied the
		// crashed store, delete every key of the copy (the one its forced
		// scan reopens), as if that recovery lost them.
		if os.Getenv("KDBTOOL_TEST_DEMO_LOSE_SCAN") == "1" {
			testHookDemoCopied = func(scanDir string) {
				if err := deleteIndex(scanDir, "demo"); err != nil {
					fmt.Fprintf(os.Stderr, "test: emptying %s: %v\n", scanDir, err)
					os.Exit(97)
				}
			}
		}
		// KDBTOOL_TEST_PAUSE_DEMO=1: once demo has killed its writer,
		// say so on stderr and wait until stdin is closed.
		if os.Getenv("KDBTOOL_TEST_PAUSE_DEMO") == "1" {
			testHookDemoKilled = func() {
				fmt.Fprintln(os.Stderr, pausedDemo)
				io.Copy(io.Discard, os.Stdin)
			}
		}
		// KDBTOOL_TEST_PAUSE_SAVE=1: stop in the middle of saving a
		// .broken copy (say so on stderr) until killed.
		if os.Getenv("KDBTOOL_TEST_PAUSE_SAVE") == "1" {
			testHookSaving = func(name string) {
				fmt.Fprintf(os.Stderr, "%s %s\n", pausedSaving, name)
				time.Sleep(time.Hour)
			}
		}
		// KDBTOOL_TEST_PLANT_FREE_TMP=TARGET: once recover (or verify) has the store
		// open, plant a symbolic link to TARGET at db.free.tmp, where its
		// closing checkpoint writes the free list. A background checkpoint
		// (the one recovery asked for) may hold db.free.tmp for a moment:
		// the link
		// failed with EEXIST, exit 98, about once in 20 runs under -race.
		// So it is tried again until that checkpoint renamed its file.
		if target := os.Getenv("KDBTOOL_TEST_PLANT_FREE_TMP"); target != "" {
			testHookBeforeClose = func(_ context.Context, dir string) {
				deadline := time.Now().Add(10 * time.Second)
				for {
					err := os.Symlink(target, filepath.Join(dir, "db.free.tmp"))
					if err == nil {
						return
					}
					if !errors.Is(err, fs.ErrExist) || time.Now().After(deadline) {
						os.Exit(98)
					}
					time.Sleep(time.Millisecond)
				}
			}
		}
		// KDBTOOL_TEST_PAUSE_EXPORT=1: once the export has written a
		// first part of the snapshot, say so on stderr and wait until
		// interrupted.
		if os.Getenv("KDBTOOL_TEST_PAUSE_EXPORT") == "1" {
			testHookExporting = func(ctx context.Context) {
				fmt.Fprintln(os.Stderr, pausedExporting)
				<-ctx.Done()
			}
		}
		// KDBTOOL_TEST_PAUSE_FLAGS=1: once export, stress, verify, recover
		// or repair has parsed its flags, say so on stderr and wait until
		// stdin is closed and the command was interrupted.
		if os.Getenv("KDBTOOL_TEST_PAUSE_FLAGS") == "1" {
			testHookFlagsParsed = func(ctx context.Context) {
				fmt.Fprintln(os.Stderr, pausedFlags)
				io.Copy(io.Discard, os.Stdin)
				// The test signalled before it closed stdin: the
				// command goes on once it took the signal.
				<-ctx.Done()
			}
		}
		// KDBTOOL_TEST_PAUSE_REPAIR=STEP: once repair --apply has done
		// STEP (testHookRepairStep), say so on stderr and wait until
		// interrupted (or killed).
		if step := os.Getenv("KDBTOOL_TEST_PAUSE_REPAIR"); step != "" {
			testHookRepairStep = func(ctx context.Context, s string) {
				if s == step {
					fmt.Fprintf(os.Stderr, "%s %s\n", pausedRepairing, s)
					<-ctx.Done()
				}
			}
		}
		// KDBTOOL_TEST_PAUSE_OPEN=1: once recover (or a writable verify)
		// has the store open, say so on stderr and wait until interrupted.
		if os.Getenv("KDBTOOL_TEST_PAUSE_OPEN") == "1" {
			testHookBeforeClose = func(ctx context.Context, _ string) {
				fmt.Fprintln(os.Stderr, pausedOpen)
				<-ctx.Done()
			}
		}
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// deleteIndex deletes every key of index in the store at dir.
func deleteIndex(dir, index string) error {
	db, err := kdb.Open(dir, nil)
	if err != nil {
		return err
	}
	b := kdb.NewBatch()
	err = db.View(func(s *kdb.Snapshot) error {
		it := s.Iter(index)
		for k := range it.All() {
			b.Delete(index, bytes.Clone(k))
		}
		return it.Err()
	})
	if err == nil {
		err = db.Write(b)
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}
