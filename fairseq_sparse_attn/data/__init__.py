"""Datasets and document construction."""
