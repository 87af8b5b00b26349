// Package lint holds checks on the source tree that run as tests: the import
// layering of docs/DESIGN.md (the package diagram at its top) and the root module's dependency list.
package lint
