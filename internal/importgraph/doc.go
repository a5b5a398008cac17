// Package importgraph holds the test that keeps the module's import graph layered: each package
// sits on a floor (floors in importgraph_test.go, docs/DESIGN.md "Layers"), and no package imports
// one on a floor above its own. It has no code of its own.
package importgraph
