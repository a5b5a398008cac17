// Package version holds allocscope's version, written into every trace and report.
package version

// Version is the allocscope release this build belongs to.
const Version = "0.1.0"
