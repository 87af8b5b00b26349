package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// errInterrupted is the error of a command stopped by SIGINT or SIGTERM.
var errInterrupted = errors.New("interrupted")

// onInterrupt returns a context that is cancelled at the first SIGINT or
// SIGTERM, and stop, to be called when the command ends. A signal the
// process was started ignoring (a shell's background job) stays ignored.
// After the first signal both have their default effect again, so that a
// second ctrl-C kills a command whose cleanup is slow (what a kill leaves
// is removed by the next run, as before).
func onInterrupt() (context.Context, func()) {
	var sigs []os.Signal
	for _, s := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		if !signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	if len(sigs) == 0 {
		return context.WithCancel(context.Background())
	}
	ctx, stop := signal.NotifyContext(context.Background(), sigs...)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}

// stopReadOnly makes the first SIGINT or SIGTERM (ctx done) end a command
// that writes nothing at once: it prints that the command was interrupted
// and what (why: nothing was changed), and exits 130. The command calls
// the function it returns before it returns (before onInterrupt's stop,
// which cancels ctx too).
func stopReadOnly(ctx context.Context, name, why string, stderr io.Writer) (release func() bool) {
	return context.AfterFunc(ctx, func() {
		fmt.Fprintf(stderr, "kdbtool %s: %s: %s\n", name, errInterrupted, why)
		os.Exit(exitInterrupted)
	})
}

// ctxWriter writes to w until ctx is done, then fails with errInterrupted.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, errInterrupted
	}
	return c.w.Write(p)
}

// ctxReader reads from r until ctx is done, then fails with errInterrupted.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, errInterrupted
	}
	n, err := c.r.Read(p)
	if err != nil && c.ctx.Err() != nil {
		return n, errInterrupted // the read was cut by the interrupt
	}
	return n, err
}

// testHookFlagsParsed, if set (by tests only: TestMain sets it in a child
// process), is called by export, stress, verify, recover and repair once
// their flags are parsed,
// before their checks, with the context onInterrupt gave them: a signal
// sent while it runs must be handled as one during the run.
var testHookFlagsParsed func(ctx context.Context)
