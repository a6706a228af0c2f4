"""Retrievers: rank a question's history turns without any model call."""
