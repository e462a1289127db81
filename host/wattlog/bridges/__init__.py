"""bridges"""
