"""Serving, render stage: the serving sections of the terminal and HTML reports; format, never compute."""
