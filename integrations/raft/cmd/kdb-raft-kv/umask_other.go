//go:build !unix

package main

func restrictUmask() {}
