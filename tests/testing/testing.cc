// testing.cc: anchor of the packserve_testing library; helpers live beside it.
namespace packserve::testing {}
